// A compact binary encoding of KvPoolDescriptor and TransferTarget for tools and tests that
// pass them between processes without gRPC (the product carries them in the KvTarget
// protobuf message). Hex helpers make them command-line safe.
// Thread-safety: stateless.
#ifndef PDSERVE_KVTRANSFER_DESCRIPTOR_CODEC_H_
#define PDSERVE_KVTRANSFER_DESCRIPTOR_CODEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "kvtransfer/kv_transport.h"

namespace pdserve::kvtransfer {

std::string EncodeDescriptor(const KvPoolDescriptor& descriptor);
absl::StatusOr<KvPoolDescriptor> DecodeDescriptor(absl::string_view bytes);
std::string ToHex(absl::string_view bytes);
absl::StatusOr<std::string> FromHex(absl::string_view hex);

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_DESCRIPTOR_CODEC_H_
