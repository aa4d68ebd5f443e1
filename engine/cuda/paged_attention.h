// The paged kernels of the CUDA forward pass: writing a batch's K/V into the pool and paged
// attention over the packed batch (prefill chunks and decode tokens in one launch: one block
// per query token and head, walking the sequence's block table in tiles with an online
// softmax; split-K over partitions for small launches over long contexts). Pool layout and
// block tables are the CPU engine's: [layer][K|V][block][block_size][kv_heads][head_dim].
// Thread-safety: stateless; launches on one stream run in order.
#ifndef PDSERVE_ENGINE_CUDA_PAGED_ATTENTION_H_
#define PDSERVE_ENGINE_CUDA_PAGED_ATTENTION_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "common/kv_layout.h"
#include "engine/cuda/cuda_model.h"

namespace pdserve::engine::cuda {

// The largest head_dim the attention kernel takes (four dimensions per thread).
inline constexpr int kMaxAttentionHeadDim = 512;

// Where the paged kernels find the pool: [layer][K|V][block][block_size][kv_heads][head_dim].
struct PoolGeometry {
  int num_blocks;
  int block_size;
  int kv_heads;
  int head_dim;
  __host__ __device__ size_t Region(int layer, int kv, int block) const {
    return ((static_cast<size_t>(layer) * 2 + kv) * num_blocks + block) *
           static_cast<size_t>(block_size) * kv_heads * head_dim;
  }
};

// The batch as the kernels read it (device arrays).
struct BatchView {
  const int32_t* token_seq;     // [T] sequence of each token
  const int32_t* token_pos;     // [T] position of each token
  const int32_t* table_offset;  // [S] start of the sequence's block table in `tables`
  const int32_t* tables;        // concatenated block tables
};

// Split-K: one partition's state (running max, running sum, head_dim unnormalised sums).
__host__ __device__ inline size_t PartialStride(int head_dim) { return 2 + head_dim; }

// Floats of split-K state for `tokens` x `heads` x `partitions`.
inline size_t AttentionPartialFloats(int tokens, int heads, int partitions, int head_dim) {
  return static_cast<size_t>(tokens) * heads * partitions * PartialStride(head_dim);
}

// Writes every token's K and V (columns q_dim.. of its qkv row) into layer `layer` of the pool
// (`dtype` elements).
absl::Status WriteKv(const float* qkv, int qkv_stride, int q_dim, int kv_dim, int layer,
                     PoolGeometry g, BatchView b, int tokens, DType dtype, void* pool,
                     cudaStream_t stream);

// out[t, head] = causal attention of token t's query over its sequence's positions <= its own,
// read from layer `layer` of the pool; `split` from PlanSplitK, `partials` holding
// AttentionPartialFloats when split.
absl::Status PagedAttention(const float* qkv, int qkv_stride, int num_heads, int group, int layer,
                            PoolGeometry g, BatchView b, int tokens, DType dtype, const void* pool,
                            float scale, const SplitK& split, float* partials, float* out,
                            cudaStream_t stream);

}  // namespace pdserve::engine::cuda

#endif  // PDSERVE_ENGINE_CUDA_PAGED_ATTENTION_H_
