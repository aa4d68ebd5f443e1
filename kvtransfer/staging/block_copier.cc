#include "kvtransfer/staging/block_copier.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kvtransfer/kv_transport.h"

namespace pdserve::kvtransfer {

absl::StatusOr<std::vector<RegionCopy>> PlanRegionCopies(const KvLayout& device,
                                                         const KvLayout& host, int first_layer,
                                                         int num_layers,
                                                         absl::Span<const int32_t> device_blocks,
                                                         absl::Span<const int32_t> host_blocks) {
  if (!device.SameGeometry(host)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "staging pool geometry differs from the KV pool: ", device.GeometryMismatch(host)));
  }
  if (device_blocks.size() != host_blocks.size()) {
    return absl::InvalidArgumentError(absl::StrCat("staging copy: ", device_blocks.size(),
                                                   " device blocks for ", host_blocks.size(),
                                                   " staging blocks"));
  }
  if (first_layer < 0 || num_layers < 0 || first_layer + num_layers > device.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("staging copy: layers [", first_layer, ", ",
                                                   first_layer + num_layers, ") outside [0, ",
                                                   device.num_layers, ")"));
  }
  for (size_t i = 0; i < device_blocks.size(); ++i) {
    if (device_blocks[i] < 0 || device_blocks[i] >= device.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("staging copy: device block ",
                                                     device_blocks[i], " outside [0, ",
                                                     device.num_blocks, ")"));
    }
    if (host_blocks[i] < 0 || host_blocks[i] >= host.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("staging copy: staging block ", host_blocks[i],
                                                     " outside [0, ", host.num_blocks, ")"));
    }
  }
  const std::vector<BlockRun> runs = CoalesceRuns(device_blocks, host_blocks);
  std::vector<RegionCopy> copies;
  copies.reserve(runs.size() * 2 * num_layers);
  for (int layer = first_layer; layer < first_layer + num_layers; ++layer) {
    for (int kv = 0; kv < 2; ++kv) {
      for (const BlockRun& run : runs) {
        copies.push_back({device.RegionOffset(layer, kv, run.source_first),
                          host.RegionOffset(layer, kv, run.target_first),
                          device.region_bytes() * run.count});
      }
    }
  }
  return copies;
}

void CopyRegionsInHostMemory(const std::vector<RegionCopy>& copies, void* device_base,
                             void* host_base, bool to_host) {
  auto* device = static_cast<uint8_t*>(device_base);
  auto* host = static_cast<uint8_t*>(host_base);
  for (const RegionCopy& c : copies) {
    if (to_host) {
      std::memcpy(host + c.host_offset, device + c.device_offset, c.bytes);
    } else {
      std::memcpy(device + c.device_offset, host + c.host_offset, c.bytes);
    }
  }
}

}  // namespace pdserve::kvtransfer
