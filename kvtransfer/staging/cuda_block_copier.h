// The BlockCopier of a CUDA worker: cudaMemcpyAsync between its device KV pool and the
// transport's registered host staging pool (page-locked with cudaHostRegister here, so the
// copies are asynchronous DMA), on a non-blocking side stream that overlaps the forward pass's
// stream; one event per ticket.
// Thread-safety: every method may be called from any thread.
#ifndef PDSERVE_KVTRANSFER_STAGING_CUDA_BLOCK_COPIER_H_
#define PDSERVE_KVTRANSFER_STAGING_CUDA_BLOCK_COPIER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kvtransfer/staging/block_copier.h"

namespace pdserve::kvtransfer {

// FAILED_PRECONDITION when built without CUDA or without a device.
absl::StatusOr<std::unique_ptr<BlockCopier>> MakeCudaBlockCopier(PoolView device, PoolView host,
                                                                 int cuda_device);

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_STAGING_CUDA_BLOCK_COPIER_H_
