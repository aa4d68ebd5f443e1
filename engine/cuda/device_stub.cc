#include "engine/cuda/device.h"

namespace pdserve::engine::cuda {

DeviceInfo ProbeDevices() {
  DeviceInfo info;
  info.reason = "built without CUDA (PDSERVE_CUDA=OFF)";
  return info;
}

}  // namespace pdserve::engine::cuda
