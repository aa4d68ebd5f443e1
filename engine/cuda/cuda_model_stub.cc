// The CUDA model in a build without nvcc (PDSERVE_CUDA=OFF, e.g. the sanitizer builds): the
// backend exists and says why it cannot run. The real one is cuda_model.cu.
#include "engine/cuda/cuda_model.h"

namespace pdserve::engine::cuda {

absl::StatusOr<std::unique_ptr<Model>> LoadCudaModel(Checkpoint&, const CudaModelOptions&) {
  return absl::FailedPreconditionError(
      "backend cuda: built without CUDA (PDSERVE_CUDA=OFF); use --backend=cpu");
}

CudaGraphStats GetCudaGraphStats(const Model&) { return {}; }

std::optional<DType> GetCudaWeightDtype(const Model&) { return std::nullopt; }

}  // namespace pdserve::engine::cuda
