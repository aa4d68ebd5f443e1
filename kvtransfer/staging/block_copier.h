// Copies between a KV pool in device memory and a pinned host staging pool, for a transport
// that cannot register device memory (Debian's UCX 1.13 has no CUDA transports): the prefill
// worker copies each layer device -> host as its layer hook fires and puts from the staging
// blocks; the decode worker receives into staging blocks and copies host -> device before the
// sequence runs. Copies are asynchronous and ordered (one stream): a ticket's Wait returns once
// that copy and every earlier one has completed.
// The pools share their geometry (KvLayout apart from num_blocks); the block lists are equal in
// length, position for position.
// Thread-safety: every method may be called from any thread.
#ifndef PDSERVE_KVTRANSFER_STAGING_BLOCK_COPIER_H_
#define PDSERVE_KVTRANSFER_STAGING_BLOCK_COPIER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/kv_layout.h"

namespace pdserve::kvtransfer {

// Where a pool's memory is: its base and its layout.
struct PoolView {
  void* base = nullptr;
  KvLayout layout;
};

class BlockCopier {
 public:
  virtual ~BlockCopier() = default;
  // Enqueues layer `layer`'s K and V of device_blocks[i] -> host_blocks[i].
  virtual absl::StatusOr<uint64_t> DeviceToHost(int layer, absl::Span<const int32_t> device_blocks,
                                                absl::Span<const int32_t> host_blocks) = 0;
  // Enqueues every layer's K and V of host_blocks[i] -> device_blocks[i].
  virtual absl::StatusOr<uint64_t> HostToDevice(absl::Span<const int32_t> host_blocks,
                                                absl::Span<const int32_t> device_blocks) = 0;
  // OK once copy `ticket` (and every earlier one) is complete; DEADLINE_EXCEEDED after
  // `timeout`; the copy's error if it failed.
  virtual absl::Status Wait(uint64_t ticket, absl::Duration timeout) = 0;
};

// The (offset in the device pool, offset in the host pool, bytes) copies one direction needs:
// one per run of consecutive block pairs per (layer, K|V). Checks the geometry and the block
// ids; shared by every BlockCopier.
struct RegionCopy {
  size_t device_offset;
  size_t host_offset;
  size_t bytes;
};
absl::StatusOr<std::vector<RegionCopy>> PlanRegionCopies(const KvLayout& device,
                                                         const KvLayout& host, int first_layer,
                                                         int num_layers,
                                                         absl::Span<const int32_t> device_blocks,
                                                         absl::Span<const int32_t> host_blocks);

// Runs `copies` between two pools in host memory (device_base standing for the pool's side),
// towards the host side when `to_host`.
void CopyRegionsInHostMemory(const std::vector<RegionCopy>& copies, void* device_base,
                             void* host_base, bool to_host);

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_STAGING_BLOCK_COPIER_H_
