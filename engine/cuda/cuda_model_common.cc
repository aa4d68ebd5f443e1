#include <algorithm>

#include "engine/cuda/cuda_model.h"

namespace pdserve::engine::cuda {

size_t CudaWeightBytes(const ModelConfig& c, DType weight_dtype) {
  const size_t h = c.hidden_size;
  const size_t qkv = static_cast<size_t>(c.q_dim()) + 2 * c.kv_dim();
  // Matrices (embedding, LM head, projections) in the weight type; norms and biases in f32.
  size_t matrix = 2 * static_cast<size_t>(c.vocab_size) * h;
  size_t vectors = h;  // The final norm.
  matrix +=
      (qkv * h + h * c.q_dim() + 3 * static_cast<size_t>(c.intermediate_size) * h) * c.num_layers;
  size_t per_layer = 2 * h;
  if (c.qk_norm) per_layer += 2 * c.head_dim;
  if (c.qkv_bias) per_layer += qkv;
  if (c.o_bias) per_layer += h;
  if (c.mlp_bias) per_layer += 2 * static_cast<size_t>(c.intermediate_size) + h;
  vectors += per_layer * c.num_layers;
  return matrix * DTypeSize(weight_dtype) + vectors * sizeof(float);
}

SplitK PlanSplitK(int tokens, int heads, int max_positions, int partition, int multiprocessors) {
  SplitK split;
  if (partition <= 0 || max_positions <= partition) return split;
  // Enough (token, head) blocks already: splitting only adds the merge.
  if (static_cast<int64_t>(tokens) * heads >= 2 * static_cast<int64_t>(multiprocessors))
    return split;
  split.partition =
      std::max(partition, (max_positions + kMaxSplitKPartitions - 1) / kMaxSplitKPartitions);
  split.partitions = (max_positions + split.partition - 1) / split.partition;
  if (split.partitions < 2) split = SplitK{};
  return split;
}

}  // namespace pdserve::engine::cuda
