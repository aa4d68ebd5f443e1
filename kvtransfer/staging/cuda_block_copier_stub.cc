// The CUDA staging copier in a build without nvcc: says why there is none.
#include "kvtransfer/staging/cuda_block_copier.h"

namespace pdserve::kvtransfer {

absl::StatusOr<std::unique_ptr<BlockCopier>> MakeCudaBlockCopier(PoolView, PoolView, int) {
  return absl::FailedPreconditionError(
      "staging: built without CUDA (PDSERVE_CUDA=OFF); use --backend=cpu");
}

}  // namespace pdserve::kvtransfer
