// What every CUDA source of the engine shares: errors as absl::Status, device memory as RAII
// (DeviceArray), and cuBLAS opened at run time (never linked: see CublasLibrary).
// Thread-safety: stateless helpers; a CublasLibrary is a table of function pointers.
#ifndef PDSERVE_ENGINE_CUDA_CUDA_UTIL_H_
#define PDSERVE_ENGINE_CUDA_CUDA_UTIL_H_

#include <cublas_api.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::engine::cuda {

inline absl::Status CudaOk(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cuda ", what, ": ", cudaGetErrorString(err)));
}

inline absl::Status CublasOk(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cublas ", what, ": status ", static_cast<int>(s)));
}

// Device memory of T, freed with it; grown (contents discarded) by Reserve.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }

  absl::Status Reserve(size_t n) {
    if (n <= size_) return absl::OkStatus();
    cudaFree(data_);
    data_ = nullptr;
    size_ = 0;
    RETURN_IF_ERROR(CudaOk(cudaMalloc(&data_, n * sizeof(T)), "cudaMalloc"));
    size_ = n;
    return absl::OkStatus();
  }
  absl::Status Upload(const std::vector<T>& host) { return Upload(host.data(), host.size()); }
  absl::Status Upload(const T* host, size_t n) {
    RETURN_IF_ERROR(Reserve(n));
    if (n == 0) return absl::OkStatus();
    return CudaOk(cudaMemcpy(data_, host, n * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  // Zeroes the first n elements (reserving them).
  absl::Status Zero(size_t n) {
    RETURN_IF_ERROR(Reserve(n));
    return CudaOk(cudaMemset(data_, 0, n * sizeof(T)), "cudaMemset");
  }
  T* get() const { return data_; }
  size_t size() const { return size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

// cuBLAS, opened at run time by the one process that loads a CUDA model. Linked into every
// binary, its libraries' static thread-local storage came out of every thread's stack and
// made small-stack threads (the metrics server's) fail to start, in processes that never
// touch a GPU.
struct CublasLibrary {
  void* library = nullptr;
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  // cublasGemmEx is overloaded in C++ (a legacy cudaDataType compute type): the C symbol's type.
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm_ex = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;

  static absl::StatusOr<CublasLibrary> Open() {
    CublasLibrary b;
    for (const char* name : {"libcublas.so", "libcublas.so.13", "libcublas.so.12"}) {
      b.library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (b.library != nullptr) break;
    }
    if (b.library == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("backend cuda: cannot load cuBLAS (libcublas.so): ", dlerror()));
    }
    auto get = [&](auto& fn, const char* symbol) -> absl::Status {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(b.library, symbol));
      if (fn == nullptr)
        return absl::FailedPreconditionError(absl::StrCat("backend cuda: cuBLAS has no ", symbol));
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(get(b.create, "cublasCreate_v2"));
    RETURN_IF_ERROR(get(b.destroy, "cublasDestroy_v2"));
    RETURN_IF_ERROR(get(b.set_stream, "cublasSetStream_v2"));
    RETURN_IF_ERROR(get(b.set_math_mode, "cublasSetMathMode"));
    RETURN_IF_ERROR(get(b.sgemm, "cublasSgemm_v2"));
    RETURN_IF_ERROR(get(b.gemm_ex, "cublasGemmEx"));
    RETURN_IF_ERROR(get(b.set_workspace, "cublasSetWorkspace_v2"));
    return b;
  }
};

}  // namespace pdserve::engine::cuda

#endif  // PDSERVE_ENGINE_CUDA_CUDA_UTIL_H_
