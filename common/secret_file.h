// Shared secrets read from files (an API key, the cluster's registration token), as a
// Kubernetes Secret mounts them, and compared without leaking their bytes through timing.
// Thread-safety: stateless.
#ifndef PDSERVE_COMMON_SECRET_FILE_H_
#define PDSERVE_COMMON_SECRET_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pdserve {

// The secret in `path`: its text without surrounding whitespace, which must be one word of
// printable ASCII (1 to 4,096 bytes). Errors are INVALID_ARGUMENT and start with `flag`.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, absl::string_view flag);

// Whether `given` equals `expected`, in time that depends only on their lengths.
bool ConstantTimeEquals(absl::string_view given, absl::string_view expected);

}  // namespace pdserve

#endif  // PDSERVE_COMMON_SECRET_FILE_H_
