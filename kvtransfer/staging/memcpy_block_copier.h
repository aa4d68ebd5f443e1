// The BlockCopier for a KV pool in host memory staged anyway (--kv_staging=always): each copy
// runs at once on the caller's thread (host memory needs no stream), so a ticket is complete
// when it is returned. This makes the staged offload path run, and be tested end to end, on
// machines without a GPU; the CUDA copier is the one a device pool uses.
// Thread-safety: every method may be called from any thread (copies of different blocks).
#ifndef PDSERVE_KVTRANSFER_STAGING_MEMCPY_BLOCK_COPIER_H_
#define PDSERVE_KVTRANSFER_STAGING_MEMCPY_BLOCK_COPIER_H_

#include <atomic>

#include "kvtransfer/staging/block_copier.h"

namespace pdserve::kvtransfer {

class MemcpyBlockCopier final : public BlockCopier {
 public:
  MemcpyBlockCopier(PoolView pool, PoolView staging) : pool_(pool), staging_(staging) {}

  absl::StatusOr<uint64_t> DeviceToHost(int layer, absl::Span<const int32_t> pool_blocks,
                                        absl::Span<const int32_t> staging_blocks) override;
  absl::StatusOr<uint64_t> HostToDevice(absl::Span<const int32_t> staging_blocks,
                                        absl::Span<const int32_t> pool_blocks) override;
  absl::Status Wait(uint64_t ticket, absl::Duration timeout) override;

 private:
  const PoolView pool_, staging_;
  std::atomic<uint64_t> next_ticket_{1};
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_STAGING_MEMCPY_BLOCK_COPIER_H_
