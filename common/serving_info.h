// The "serving info" file a server writes once it is listening: the addresses it actually
// bound (after asking for port 0), so that launchers (pdctl, tests) find it without races.
// Format: one "key=value" per line, e.g. "grpc=127.0.0.1:41234\nmetrics=127.0.0.1:41235\n".
// Written to a temporary file and renamed, so readers never see a partial file.
// Thread-safety: stateless.
#ifndef PDSERVE_COMMON_SERVING_INFO_H_
#define PDSERVE_COMMON_SERVING_INFO_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pdserve {

using ServingInfo = std::map<std::string, std::string>;

absl::Status WriteServingInfo(const std::string& path, const ServingInfo& info);
absl::StatusOr<ServingInfo> ReadServingInfo(const std::string& path);

}  // namespace pdserve

#endif  // PDSERVE_COMMON_SERVING_INFO_H_
