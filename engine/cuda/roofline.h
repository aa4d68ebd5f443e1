// The device's own ceilings, measured in the run that measures the engine against them
// (pdserve-bench engine --backend=cuda): device-to-device copy bandwidth (the decode floor's
// denominator) and cuBLAS throughput on the engine's GEMM shapes (the prefill baseline).
// Thread-safety: each call uses its own stream and handles.
#ifndef PDSERVE_ENGINE_CUDA_ROOFLINE_H_
#define PDSERVE_ENGINE_CUDA_ROOFLINE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/kv_layout.h"

namespace pdserve::engine::cuda {

// Bytes of device memory traffic per second (read plus write) copying 1 GiB device to device,
// best of 5: the rate a decode step that streams its weights once can read them at.
absl::StatusOr<double> DeviceCopyBandwidth(int device);

struct GemmShape {
  int m, n, k;  // out[m, n] = in[m, k] x W[n, k]^T.
};

// cuBLAS FLOP/s over `shapes` run back to back as the CUDA model runs them: W in
// `weight_dtype` (f32: strict-FP32 SGEMM; f16/bf16: GemmEx on tensor cores with f32
// accumulation and output), best of 3.
absl::StatusOr<double> CublasGemmFlops(const std::vector<GemmShape>& shapes, DType weight_dtype,
                                       int device);

}  // namespace pdserve::engine::cuda

#endif  // PDSERVE_ENGINE_CUDA_ROOFLINE_H_
