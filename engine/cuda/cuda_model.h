// The CUDA backend: the Llama-family decoder of the CPU engine (same checkpoints, same fused
// q/k/v and gate/up layout, same KV pool layout and block tables) on one GPU. Weights live in
// device memory as f32, bf16 or f16 (CudaModelOptions::weight_dtype); projections run through
// cuBLAS (f32: strict FP32, no TF32; half: tensor cores, f32 accumulation; the library is opened
// at run time); the row kernels are
// engine/cuda/kernels.h; attention is one paged kernel over the whole packed batch (prefill chunks
// and decode tokens together: one block per query token and head, walking the sequence's block
// table in tiles with an online softmax). The KV pool is in device memory (AllocateKvPool); the
// layer hook fires after the layer's K/V writes have completed on the device. Logits are copied
// back to the host, or sampled on the device (ForwardOptions::sample_rows). Long contexts in
// small batches split attention over partitions (split-K); decode steps of chosen batch sizes
// replay CUDA graphs. A KV transport reaches the device pool through pinned host staging
// (kvtransfer/staging/). Thread-safety: Forward() is called by one thread at a
// time (one stream, reused scratch).
#ifndef PDSERVE_ENGINE_CUDA_CUDA_MODEL_H_
#define PDSERVE_ENGINE_CUDA_CUDA_MODEL_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/checkpoint.h"
#include "engine/model.h"

namespace pdserve::engine::cuda {

struct CudaModelOptions {
  int device = 0;
  // The projection matrices' and embedding tables' element type on the device. f32 runs strict
  // FP32 GEMMs (the checking mode, equal to the CPU engine within 1e-3); bf16 and f16 halve the
  // bytes a decode step streams and run cuBLAS GEMMs on tensor cores with f32 accumulation
  // (activations are rounded to the weight type before each GEMM). Norms and biases stay f32.
  DType weight_dtype = DType::kF32;
  // Split-K attention: when a step has too few (token, head) pairs to fill the device (fewer
  // than two blocks per multiprocessor: small decode batches) and a context longer than this
  // many positions, each pair's positions are spread over partitions of this size whose
  // softmax states are merged after. 0 never splits. Default 512.
  int split_k_partition = 512;
  // Decode steps (every sequence one token, all wanting logits, no layer hook) of these batch
  // sizes replay a CUDA graph instead of launching ~15 kernels per layer. Empty by default:
  // `pdserve-bench engine --backend=cuda` measures replay against eager per batch size, and
  // only the sizes where replay wins belong here (launch overhead matters at small batches;
  // at large ones the GEMMs dominate and a graph only costs memory).
  std::vector<int> graph_batch_sizes;
};

struct CudaGraphStats {
  int64_t captured = 0;  // Graphs captured (a batch size's second decode step, or recaptures).
  int64_t replays = 0;   // Decode steps that replayed one.
};
// The CUDA model's graph counters; zeros for any other model.
CudaGraphStats GetCudaGraphStats(const Model& model);
// The CUDA model's weight type (CudaModelOptions::weight_dtype); nullopt for any other model.
std::optional<DType> GetCudaWeightDtype(const Model& model);

// How one attention launch is split (PlanSplitK).
struct SplitK {
  int partitions = 1;  // 1: no split.
  int partition = 0;   // Positions per partition when split.
};

// The split for `tokens` query tokens of `heads` heads whose longest context is
// `max_positions`, on a device of `multiprocessors`: at most kMaxPartitions partitions, each
// at least `partition` positions (0 disables).
SplitK PlanSplitK(int tokens, int heads, int max_positions, int partition, int multiprocessors);
inline constexpr int kMaxSplitKPartitions = 64;

// FAILED_PRECONDITION when built without CUDA or without a usable device;
// RESOURCE_EXHAUSTED (saying how much is needed and how much is free) when the weights do not
// fit in device memory.
absl::StatusOr<std::unique_ptr<Model>> LoadCudaModel(Checkpoint& checkpoint,
                                                     const CudaModelOptions& options);

// Device bytes the model's weights take with matrices of `weight_dtype` (what LoadCudaModel
// checks against the free memory), from the config alone.
size_t CudaWeightBytes(const ModelConfig& config, DType weight_dtype = DType::kF32);

}  // namespace pdserve::engine::cuda

#endif  // PDSERVE_ENGINE_CUDA_CUDA_MODEL_H_
