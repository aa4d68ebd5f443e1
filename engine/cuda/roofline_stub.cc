// The device ceilings in a build without nvcc: say why there are none.
#include "engine/cuda/roofline.h"

namespace pdserve::engine::cuda {

absl::StatusOr<double> DeviceCopyBandwidth(int) {
  return absl::FailedPreconditionError("backend cuda: built without CUDA (PDSERVE_CUDA=OFF)");
}

absl::StatusOr<double> CublasGemmFlops(const std::vector<GemmShape>&, DType, int) {
  return absl::FailedPreconditionError("backend cuda: built without CUDA (PDSERVE_CUDA=OFF)");
}

}  // namespace pdserve::engine::cuda
