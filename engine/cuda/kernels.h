// Row-wise kernels of the CUDA forward pass, the device counterparts of engine/cpu/kernels.h:
// embedding gather, RMSNorm, bias and residual add, SiLU-and-multiply, RoPE. Every pointer is
// device memory; each call enqueues one launch on `stream` and returns the launch's error
// (execution errors surface at the next synchronisation). Row layouts are the CPU engine's,
// so a CPU reference checks each kernel on the same data (tests/engine/cuda_kernels_test.cc).
// Thread-safety: stateless; launches on one stream run in order.
#ifndef PDSERVE_ENGINE_CUDA_KERNELS_H_
#define PDSERVE_ENGINE_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "common/kv_layout.h"

namespace pdserve::engine::cuda {

// out[r, :] = table[tokens[r], :] widened to float32; `table` holds [vocab, hidden] of
// `type` (f32, f16 or bf16). Token ids must be in range (the batch is validated on the host
// first).
absl::Status EmbeddingGather(const void* table, DType type, const int32_t* tokens, int rows,
                             int hidden, float* out, cudaStream_t stream);

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight for `rows` rows of `dim` with strides
// (elements between rows) `x_stride` and `y_stride`; y may alias x. One block per row.
absl::Status RmsNorm(const float* x, int x_stride, const float* weight, float eps, int rows,
                     int dim, float* y, int y_stride, cudaStream_t stream);

// The per-head RMSNorm of Qwen3's q/k norms in one launch: for every row and each of
// `num_heads` heads of `head_dim` starting at column `offset` (row stride `stride`), in place,
// with one `weight` of head_dim shared by the heads.
absl::Status RmsNormHeads(float* x, int rows, int stride, int offset, int num_heads, int head_dim,
                          const float* weight, float eps, cudaStream_t stream);

// out[i] = in[i] rounded to nearest-even in `type` (f16 or bf16): the activations a half-
// precision GEMM reads.
absl::Status Narrow(const float* in, int64_t n, DType type, void* out, cudaStream_t stream);

// y[r, i] += b[i] for `rows` rows of `dim` with row stride `stride`.
absl::Status AddBias(float* y, const float* b, int rows, int dim, int stride, cudaStream_t stream);

// y[i] += x[i] for n elements (the residual connection).
absl::Status AddInPlace(float* y, const float* x, int64_t n, cudaStream_t stream);

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i]: the fused gate/up projection's
// rows hold the gate then the up half (the CPU engine's layout).
absl::Status SiluMul(const float* gate_up, int rows, int inter, float* out, cudaStream_t stream);

// Rotates `num_heads` heads of `head_dim` starting at column `offset` of every row (row
// stride `stride`) by the rotate-half convention of Hugging Face Llama: for i < head_dim/2,
// (x[i], x[i+h/2]) -> (x[i] c - x[i+h/2] s, x[i+h/2] c + x[i] s), with c, s the row's entries
// of `cos` / `sin` ([rows, head_dim/2]).
absl::Status Rope(float* x, int rows, int stride, int offset, int num_heads, int head_dim,
                  const float* cos, const float* sin, cudaStream_t stream);

}  // namespace pdserve::engine::cuda

#endif  // PDSERVE_ENGINE_CUDA_KERNELS_H_
