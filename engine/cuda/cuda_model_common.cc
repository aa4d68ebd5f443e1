#include "engine/cuda/cuda_model.h"

namespace pdserve::engine::cuda {

size_t CudaWeightBytes(const ModelConfig& c) {
  const size_t h = c.hidden_size;
  const size_t qkv = static_cast<size_t>(c.q_dim()) + 2 * c.kv_dim();
  size_t floats = 2 * static_cast<size_t>(c.vocab_size) * h + h;  // Embedding, LM head, norm.
  size_t per_layer = 2 * h + qkv * h + h * c.q_dim() +
                     2 * static_cast<size_t>(c.intermediate_size) * h + h * c.intermediate_size;
  if (c.qk_norm) per_layer += 2 * c.head_dim;
  if (c.qkv_bias) per_layer += qkv;
  if (c.o_bias) per_layer += h;
  if (c.mlp_bias) per_layer += 2 * static_cast<size_t>(c.intermediate_size) + h;
  floats += per_layer * c.num_layers;
  return floats * sizeof(float);
}

}  // namespace pdserve::engine::cuda
