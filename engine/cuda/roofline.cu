#include <algorithm>

#include "engine/cuda/cuda_util.h"
#include "engine/cuda/roofline.h"

namespace pdserve::engine::cuda {
namespace {

// A stream and two events, destroyed with it.
class Timer {
 public:
  absl::Status Init() {
    RETURN_IF_ERROR(CudaOk(cudaStreamCreate(&stream_), "cudaStreamCreate"));
    RETURN_IF_ERROR(CudaOk(cudaEventCreate(&start_), "cudaEventCreate"));
    return CudaOk(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~Timer() {
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stop_ != nullptr) cudaEventDestroy(stop_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  absl::Status Start() { return CudaOk(cudaEventRecord(start_, stream_), "cudaEventRecord"); }
  absl::StatusOr<double> StopSeconds() {
    RETURN_IF_ERROR(CudaOk(cudaEventRecord(stop_, stream_), "cudaEventRecord"));
    RETURN_IF_ERROR(CudaOk(cudaEventSynchronize(stop_), "cudaEventSynchronize"));
    float ms = 0;
    RETURN_IF_ERROR(CudaOk(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime"));
    return ms / 1e3;
  }
  cudaStream_t stream() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace

absl::StatusOr<double> DeviceCopyBandwidth(int device) {
  RETURN_IF_ERROR(CudaOk(cudaSetDevice(device), "cudaSetDevice"));
  const size_t bytes = size_t{1} << 30;
  DeviceArray<uint8_t> src, dst;
  RETURN_IF_ERROR(src.Zero(bytes));
  RETURN_IF_ERROR(dst.Zero(bytes));
  Timer timer;
  RETURN_IF_ERROR(timer.Init());
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {
    RETURN_IF_ERROR(timer.Start());
    RETURN_IF_ERROR(CudaOk(
        cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, timer.stream()),
        "copy"));
    ASSIGN_OR_RETURN(double seconds, timer.StopSeconds());
    if (rep > 0) best = std::max(best, 2.0 * bytes / seconds);  // The first warms up.
  }
  return best;
}

absl::StatusOr<double> CublasGemmFlops(const std::vector<GemmShape>& shapes, DType weight_dtype,
                                       int device) {
  RETURN_IF_ERROR(CudaOk(cudaSetDevice(device), "cudaSetDevice"));
  ASSIGN_OR_RETURN(CublasLibrary blas, CublasLibrary::Open());
  size_t max_in = 1, max_w = 1, max_out = 1;
  double flops = 0;
  for (const GemmShape& s : shapes) {
    max_in = std::max(max_in, size_t(s.m) * s.k);
    max_w = std::max(max_w, size_t(s.n) * s.k);
    max_out = std::max(max_out, size_t(s.m) * s.n);
    flops += 2.0 * s.m * s.n * s.k;
  }
  const bool half = weight_dtype != DType::kF32;
  const size_t element = half ? 2 : 4;
  DeviceArray<uint8_t> in_bytes, w_bytes;
  DeviceArray<float> out_floats;
  RETURN_IF_ERROR(in_bytes.Zero(max_in * element));
  RETURN_IF_ERROR(w_bytes.Zero(max_w * element));
  RETURN_IF_ERROR(out_floats.Zero(max_out));
  void* in = in_bytes.get();
  void* w = w_bytes.get();
  void* out = out_floats.get();
  Timer timer;
  RETURN_IF_ERROR(timer.Init());
  cublasHandle_t handle = nullptr;
  RETURN_IF_ERROR(CublasOk(blas.create(&handle), "cublasCreate"));
  struct HandleCloser {
    CublasLibrary* blas;
    cublasHandle_t h;
    ~HandleCloser() { blas->destroy(h); }
  } closer{&blas, handle};
  RETURN_IF_ERROR(CublasOk(blas.set_stream(handle, timer.stream()), "cublasSetStream"));
  RETURN_IF_ERROR(CublasOk(
      blas.set_math_mode(handle, half ? CUBLAS_DEFAULT_MATH : CUBLAS_PEDANTIC_MATH), "mode"));
  const cudaDataType_t type = weight_dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
  const float one = 1.0f, zero = 0.0f;
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    RETURN_IF_ERROR(timer.Start());
    for (const GemmShape& s : shapes) {
      if (half) {
        RETURN_IF_ERROR(CublasOk(blas.gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, s.n, s.m, s.k, &one,
                                              w, type, s.k, in, type, s.k, &zero, out, CUDA_R_32F,
                                              s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                                 "gemmEx"));
      } else {
        RETURN_IF_ERROR(
            CublasOk(blas.sgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, s.n, s.m, s.k, &one,
                                static_cast<const float*>(w), s.k, static_cast<const float*>(in),
                                s.k, &zero, static_cast<float*>(out), s.n),
                     "sgemm"));
      }
    }
    ASSIGN_OR_RETURN(double seconds, timer.StopSeconds());
    if (rep > 0) best = std::max(best, flops / seconds);  // The first warms up.
  }
  return best;
}

}  // namespace pdserve::engine::cuda
