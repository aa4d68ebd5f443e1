#include <cuda_runtime.h>

#include "engine/cuda/device.h"

namespace pdserve::engine::cuda {

DeviceInfo ProbeDevices() {
  DeviceInfo info;
  info.compiled = true;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    info.reason = cudaGetErrorString(err);
    cudaGetLastError();  // Clear the sticky error.
    return info;
  }
  if (count == 0) {
    info.reason = "no CUDA device";
    return info;
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) info.name = prop.name;
  info.count = count;
  return info;
}

}  // namespace pdserve::engine::cuda
