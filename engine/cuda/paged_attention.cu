#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_util.h"
#include "engine/cuda/paged_attention.h"

namespace pdserve::engine::cuda {
namespace {

__device__ inline float Load(const float* p) { return *p; }
__device__ inline float Load(const __half* p) { return __half2float(*p); }
__device__ inline float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ inline void Store(float* p, float v) { *p = v; }
__device__ inline void Store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ inline void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// One thread per (token, kv head, dim): the token's K and V into its block.
template <typename KV>
__global__ void WriteKvKernel(const float* qkv, int qkv_stride, int q_dim, int kv_dim, int layer,
                              PoolGeometry g, BatchView b, int tokens, KV* pool) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(tokens) * kv_dim) return;
  const int t = static_cast<int>(i / kv_dim);
  const int e = static_cast<int>(i % kv_dim);  // kv_head * head_dim + d
  const int pos = b.token_pos[t];
  const int block = b.tables[b.table_offset[b.token_seq[t]] + pos / g.block_size];
  const size_t in_block = static_cast<size_t>(pos % g.block_size) * kv_dim + e;
  const float* row = qkv + static_cast<int64_t>(t) * qkv_stride;
  Store(pool + g.Region(layer, 0, block) + in_block, row[q_dim + e]);
  Store(pool + g.Region(layer, 1, block) + in_block, row[q_dim + kv_dim + e]);
}

constexpr int kAttentionThreads = 128;
constexpr int kAttentionTile = 256;  // Positions scored per pass.
constexpr int kMaxDimsPerThread = kMaxAttentionHeadDim / kAttentionThreads;

__device__ float BlockReduce(float v, bool take_max, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = take_max ? fmaxf(v, other) : v + other;
  }
  const int warp = threadIdx.x / 32;
  __syncthreads();  // scratch may still be read from the previous reduction.
  if (threadIdx.x % 32 == 0) scratch[warp] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w)
    r = take_max ? fmaxf(r, scratch[w]) : r + scratch[w];
  return r;
}

// One block per (query token, head, partition): causal attention over the positions <= the
// token's, read through the sequence's block table, in tiles with an online softmax. With
// `partials` null there is one partition (all positions) and the block writes the output;
// otherwise partition blockIdx.z covers positions [z * partition, (z + 1) * partition) and
// writes its partial state (split-K: long contexts spread over more blocks than T x heads).
template <typename KV>
__global__ void PagedAttentionKernel(const float* qkv, int qkv_stride, int num_heads, int group,
                                     int layer, PoolGeometry g, BatchView b, const KV* pool,
                                     float scale, float* out, int partition, float* partials) {
  const int t = blockIdx.x;
  const int head = blockIdx.y;
  const int kv_head = head / group;
  const int hd = g.head_dim;
  const int pos = b.token_pos[t];
  const int32_t* table = b.tables + b.table_offset[b.token_seq[t]];
  extern __shared__ float shared[];
  float* q = shared;                         // [head_dim]
  float* scores = shared + hd;               // [kAttentionTile]
  float* scratch = scores + kAttentionTile;  // [warps]
  for (int d = threadIdx.x; d < hd; d += blockDim.x)
    q[d] = qkv[static_cast<int64_t>(t) * qkv_stride + head * hd + d] * scale;
  __syncthreads();
  float acc[kMaxDimsPerThread] = {0, 0, 0, 0};
  float running_max = -INFINITY;
  float running_sum = 0;
  const size_t head_offset = static_cast<size_t>(kv_head) * hd;
  const int first = partials == nullptr ? 0 : blockIdx.z * partition;
  const int end = partials == nullptr ? pos + 1 : min(pos + 1, first + partition);
  for (int start = first; start < end; start += kAttentionTile) {
    const int n = min(kAttentionTile, end - start);
    float tile_max = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      const int p = start + j;
      const int block = table[p / g.block_size];
      const KV* k = pool + g.Region(layer, 0, block) +
                    static_cast<size_t>(p % g.block_size) * g.kv_heads * hd + head_offset;
      float s = 0;
      for (int d = 0; d < hd; ++d) s += q[d] * Load(k + d);
      scores[j] = s;
      tile_max = fmaxf(tile_max, s);
    }
    tile_max = BlockReduce(tile_max, /*take_max=*/true, scratch);
    const float new_max = fmaxf(running_max, tile_max);
    const float correction = expf(running_max - new_max);  // 0 on the first tile.
    float tile_sum = 0;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      scores[j] = expf(scores[j] - new_max);
      tile_sum += scores[j];
    }
    tile_sum = BlockReduce(tile_sum, /*take_max=*/false, scratch);  // Also orders the writes.
    running_sum = running_sum * correction + tile_sum;
    for (int k = 0; k < kMaxDimsPerThread; ++k) {
      const int d = threadIdx.x + k * blockDim.x;
      if (d >= hd) break;
      float a = acc[k] * correction;
      for (int j = 0; j < n; ++j) {
        const int p = start + j;
        const int block = table[p / g.block_size];
        const KV* v = pool + g.Region(layer, 1, block) +
                      static_cast<size_t>(p % g.block_size) * g.kv_heads * hd + head_offset;
        a += scores[j] * Load(v + d);
      }
      acc[k] = a;
    }
    running_max = new_max;
    __syncthreads();  // scores are rewritten by the next tile.
  }
  if (partials != nullptr) {
    // An empty partition (past the token's position) leaves max -inf and sum 0.
    float* state =
        partials +
        ((static_cast<size_t>(t) * num_heads + head) * gridDim.z + blockIdx.z) * PartialStride(hd);
    if (threadIdx.x == 0) {
      state[0] = running_max;
      state[1] = running_sum;
    }
    for (int k = 0; k < kMaxDimsPerThread; ++k) {
      const int d = threadIdx.x + k * blockDim.x;
      if (d >= hd) break;
      state[2 + d] = acc[k];
    }
    return;
  }
  for (int k = 0; k < kMaxDimsPerThread; ++k) {
    const int d = threadIdx.x + k * blockDim.x;
    if (d >= hd) break;
    out[static_cast<int64_t>(t) * num_heads * hd + head * hd + d] = acc[k] / running_sum;
  }
}

// One block per (query token, head): merges the partitions' online-softmax states.
__global__ void CombinePartitionsKernel(const float* partials, int num_heads, int head_dim,
                                        int partitions, float* out) {
  const int t = blockIdx.x;
  const int head = blockIdx.y;
  const float* states =
      partials + (static_cast<size_t>(t) * num_heads + head) * partitions * PartialStride(head_dim);
  float max = -INFINITY;
  for (int z = 0; z < partitions; ++z) max = fmaxf(max, states[z * PartialStride(head_dim)]);
  float sum = 0;
  for (int z = 0; z < partitions; ++z) {
    const float* s = states + z * PartialStride(head_dim);
    if (s[1] > 0) sum += s[1] * expf(s[0] - max);
  }
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float v = 0;
    for (int z = 0; z < partitions; ++z) {
      const float* s = states + z * PartialStride(head_dim);
      if (s[1] > 0) v += s[2 + d] * expf(s[0] - max);
    }
    out[static_cast<int64_t>(t) * num_heads * head_dim + head * head_dim + d] = v / sum;
  }
}

// Calls `launch` with the pool pointer typed by `dtype`.
template <typename Pool, typename Launch>
void WithTypedPool(DType dtype, Pool* pool, Launch launch) {
  constexpr bool kConst = std::is_const_v<Pool>;
  using F32 = std::conditional_t<kConst, const float, float>;
  using F16 = std::conditional_t<kConst, const __half, __half>;
  using BF16 = std::conditional_t<kConst, const __nv_bfloat16, __nv_bfloat16>;
  switch (dtype) {
    case DType::kF32:
      launch(static_cast<F32*>(pool));
      break;
    case DType::kF16:
      launch(static_cast<F16*>(pool));
      break;
    case DType::kBF16:
      launch(static_cast<BF16*>(pool));
      break;
  }
}

}  // namespace

absl::Status WriteKv(const float* qkv, int qkv_stride, int q_dim, int kv_dim, int layer,
                     PoolGeometry g, BatchView b, int tokens, DType dtype, void* pool,
                     cudaStream_t stream) {
  const int64_t elements = static_cast<int64_t>(tokens) * kv_dim;
  if (elements == 0) return absl::OkStatus();
  const int blocks = static_cast<int>((elements + 255) / 256);
  WithTypedPool(dtype, pool, [&](auto* typed) {
    WriteKvKernel<<<blocks, 256, 0, stream>>>(qkv, qkv_stride, q_dim, kv_dim, layer, g, b, tokens,
                                              typed);
  });
  return CudaOk(cudaGetLastError(), "WriteKv");
}

absl::Status PagedAttention(const float* qkv, int qkv_stride, int num_heads, int group, int layer,
                            PoolGeometry g, BatchView b, int tokens, DType dtype, const void* pool,
                            float scale, const SplitK& split, float* partials, float* out,
                            cudaStream_t stream) {
  if (tokens == 0) return absl::OkStatus();
  const bool parted = split.partitions > 1;
  const dim3 grid(tokens, num_heads, parted ? split.partitions : 1);
  const size_t shared = (g.head_dim + kAttentionTile + kAttentionThreads / 32) * sizeof(float);
  WithTypedPool(dtype, pool, [&](auto* typed) {
    PagedAttentionKernel<<<grid, kAttentionThreads, shared, stream>>>(
        qkv, qkv_stride, num_heads, group, layer, g, b, typed, scale, out, split.partition,
        parted ? partials : nullptr);
  });
  RETURN_IF_ERROR(CudaOk(cudaGetLastError(), "PagedAttention"));
  if (!parted) return absl::OkStatus();
  CombinePartitionsKernel<<<dim3(tokens, num_heads), kAttentionThreads, 0, stream>>>(
      partials, num_heads, g.head_dim, split.partitions, out);
  return CudaOk(cudaGetLastError(), "CombinePartitions");
}

}  // namespace pdserve::engine::cuda
