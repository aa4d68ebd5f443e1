#include "kvtransfer/staging/memcpy_block_copier.h"

#include "common/status_macros.h"

namespace pdserve::kvtransfer {

absl::StatusOr<uint64_t> MemcpyBlockCopier::DeviceToHost(int layer,
                                                         absl::Span<const int32_t> pool_blocks,
                                                         absl::Span<const int32_t> staging_blocks) {
  ASSIGN_OR_RETURN(auto copies, PlanRegionCopies(pool_.layout, staging_.layout, layer, 1,
                                                 pool_blocks, staging_blocks));
  CopyRegionsInHostMemory(copies, pool_.base, staging_.base, /*to_host=*/true);
  return next_ticket_.fetch_add(1);
}

absl::StatusOr<uint64_t> MemcpyBlockCopier::HostToDevice(absl::Span<const int32_t> staging_blocks,
                                                         absl::Span<const int32_t> pool_blocks) {
  ASSIGN_OR_RETURN(auto copies,
                   PlanRegionCopies(pool_.layout, staging_.layout, 0, pool_.layout.num_layers,
                                    pool_blocks, staging_blocks));
  CopyRegionsInHostMemory(copies, pool_.base, staging_.base, /*to_host=*/false);
  return next_ticket_.fetch_add(1);
}

absl::Status MemcpyBlockCopier::Wait(uint64_t ticket, absl::Duration) {
  if (ticket == 0 || ticket >= next_ticket_.load()) {
    return absl::InvalidArgumentError("staging: unknown copy ticket");
  }
  return absl::OkStatus();  // Every copy completed before its ticket was returned.
}

}  // namespace pdserve::kvtransfer
