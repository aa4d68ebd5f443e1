#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "absl/strings/str_cat.h"
#include "engine/cuda/kernels.h"

namespace pdserve::engine::cuda {
namespace {

constexpr int kThreads = 256;

absl::Status Launched(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cuda ", kernel, ": ", cudaGetErrorString(err)));
}

int Blocks(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__device__ inline float Widen(float v) { return v; }
__device__ inline float Widen(__half v) { return __half2float(v); }
__device__ inline float Widen(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void EmbeddingGatherKernel(const T* table, const int32_t* tokens, int rows, int hidden,
                                      float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * hidden) return;
  const int64_t r = i / hidden;
  const int64_t c = i % hidden;
  out[i] = Widen(table[static_cast<int64_t>(tokens[r]) * hidden + c]);
}

// One block per row: a block-wide sum of squares (warp shuffles, then one value per warp
// through shared memory), then every thread scales its elements.
// blockIdx.y picks one of several `dim`-wide segments of the row (the heads of a q/k norm).
__global__ void RmsNormKernel(const float* x, int x_stride, const float* weight, float eps, int dim,
                              float* y, int y_stride) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * x_stride + blockIdx.y * dim;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * y_stride + blockIdx.y * dim;
  float ss = 0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  for (int offset = 16; offset > 0; offset /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, offset);
  __shared__ float warp_sums[kThreads / 32];
  __shared__ float scale;
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += warp_sums[w];
    scale = rsqrtf(total / static_cast<float>(dim) + eps);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * scale * weight[i];
}

__global__ void AddBiasKernel(float* y, const float* b, int rows, int dim, int stride) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * dim) return;
  y[(i / dim) * stride + i % dim] += b[i % dim];
}

template <typename T>
__global__ void NarrowKernel(const float* in, int64_t n, T* out);
template <>
__global__ void NarrowKernel(const float* in, int64_t n, __half* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half_rn(in[i]);
}
template <>
__global__ void NarrowKernel(const float* in, int64_t n, __nv_bfloat16* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void AddInPlaceKernel(float* y, const float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

__global__ void SiluMulKernel(const float* gate_up, int rows, int inter, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * inter) return;
  const int64_t r = i / inter;
  const int64_t c = i % inter;
  const float g = gate_up[r * 2 * inter + c];
  const float u = gate_up[r * 2 * inter + inter + c];
  out[i] = g / (1.0f + expf(-g)) * u;
}

// One thread per (row, head, i < head_dim / 2) pair.
__global__ void RopeKernel(float* x, int rows, int stride, int offset, int num_heads, int head_dim,
                           const float* cos, const float* sin) {
  const int half = head_dim / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * num_heads * half) return;
  const int64_t r = i / (static_cast<int64_t>(num_heads) * half);
  const int h = static_cast<int>((i / half) % num_heads);
  const int k = static_cast<int>(i % half);
  float* head = x + r * stride + offset + static_cast<int64_t>(h) * head_dim;
  const float c = cos[r * half + k];
  const float s = sin[r * half + k];
  const float a = head[k];
  const float b = head[k + half];
  head[k] = a * c - b * s;
  head[k + half] = b * c + a * s;
}

}  // namespace

absl::Status EmbeddingGather(const void* table, DType type, const int32_t* tokens, int rows,
                             int hidden, float* out, cudaStream_t stream) {
  if (rows <= 0 || hidden <= 0) return absl::OkStatus();
  const int blocks = Blocks(static_cast<int64_t>(rows) * hidden);
  switch (type) {
    case DType::kF32:
      EmbeddingGatherKernel<<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(table),
                                                             tokens, rows, hidden, out);
      break;
    case DType::kF16:
      EmbeddingGatherKernel<<<blocks, kThreads, 0, stream>>>(static_cast<const __half*>(table),
                                                             tokens, rows, hidden, out);
      break;
    case DType::kBF16:
      EmbeddingGatherKernel<<<blocks, kThreads, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(table), tokens, rows, hidden, out);
      break;
  }
  return Launched("EmbeddingGather");
}

absl::Status RmsNorm(const float* x, int x_stride, const float* weight, float eps, int rows,
                     int dim, float* y, int y_stride, cudaStream_t stream) {
  if (rows <= 0) return absl::OkStatus();
  RmsNormKernel<<<rows, kThreads, 0, stream>>>(x, x_stride, weight, eps, dim, y, y_stride);
  return Launched("RmsNorm");
}

absl::Status RmsNormHeads(float* x, int rows, int stride, int offset, int num_heads, int head_dim,
                          const float* weight, float eps, cudaStream_t stream) {
  if (rows <= 0 || num_heads <= 0) return absl::OkStatus();
  const dim3 grid(rows, num_heads);
  RmsNormKernel<<<grid, kThreads, 0, stream>>>(x + offset, stride, weight, eps, head_dim,
                                               x + offset, stride);
  return Launched("RmsNormHeads");
}

absl::Status Narrow(const float* in, int64_t n, DType type, void* out, cudaStream_t stream) {
  if (n <= 0) return absl::OkStatus();
  switch (type) {
    case DType::kF16:
      NarrowKernel<<<Blocks(n), kThreads, 0, stream>>>(in, n, static_cast<__half*>(out));
      break;
    case DType::kBF16:
      NarrowKernel<<<Blocks(n), kThreads, 0, stream>>>(in, n, static_cast<__nv_bfloat16*>(out));
      break;
    case DType::kF32:
      return absl::InvalidArgumentError("Narrow: the target type must be f16 or bf16");
  }
  return Launched("Narrow");
}

absl::Status AddBias(float* y, const float* b, int rows, int dim, int stride, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return absl::OkStatus();
  AddBiasKernel<<<Blocks(static_cast<int64_t>(rows) * dim), kThreads, 0, stream>>>(y, b, rows, dim,
                                                                                   stride);
  return Launched("AddBias");
}

absl::Status AddInPlace(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return absl::OkStatus();
  AddInPlaceKernel<<<Blocks(n), kThreads, 0, stream>>>(y, x, n);
  return Launched("AddInPlace");
}

absl::Status SiluMul(const float* gate_up, int rows, int inter, float* out, cudaStream_t stream) {
  if (rows <= 0 || inter <= 0) return absl::OkStatus();
  SiluMulKernel<<<Blocks(static_cast<int64_t>(rows) * inter), kThreads, 0, stream>>>(gate_up, rows,
                                                                                     inter, out);
  return Launched("SiluMul");
}

absl::Status Rope(float* x, int rows, int stride, int offset, int num_heads, int head_dim,
                  const float* cos, const float* sin, cudaStream_t stream) {
  if (rows <= 0 || num_heads <= 0 || head_dim < 2) return absl::OkStatus();
  const int64_t n = static_cast<int64_t>(rows) * num_heads * (head_dim / 2);
  RopeKernel<<<Blocks(n), kThreads, 0, stream>>>(x, rows, stride, offset, num_heads, head_dim, cos,
                                                 sin);
  return Launched("Rope");
}

}  // namespace pdserve::engine::cuda
