// CUDA device discovery. Compiled with nvcc when PDSERVE_CUDA is ON; without it (or without
// a driver or a GPU) every query reports no device. Any CUDA error counts as "no GPU": on
// machines with the toolkit but no driver, cudaGetDeviceCount fails with "driver version is
// insufficient" rather than cudaErrorNoDevice.
// Thread-safety: stateless.
#ifndef PDSERVE_ENGINE_CUDA_DEVICE_H_
#define PDSERVE_ENGINE_CUDA_DEVICE_H_

#include <string>

namespace pdserve::engine::cuda {

struct DeviceInfo {
  int count = 0;          // Usable CUDA devices.
  std::string name;       // Device 0's name, if any.
  std::string reason;     // Why there is none (no CUDA build, no driver, no device).
  bool compiled = false;  // Built with PDSERVE_CUDA.
};

DeviceInfo ProbeDevices();

}  // namespace pdserve::engine::cuda

#endif  // PDSERVE_ENGINE_CUDA_DEVICE_H_
