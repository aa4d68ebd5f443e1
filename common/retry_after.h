// The retry-after hint of an overloaded component, carried as structured data: a payload on
// the absl::Status inside a process, the "retry-after-ms" trailer on the wire. Callers never
// parse messages for it. Whoever refuses with RESOURCE_EXHAUSTED attaches its configured
// hint; the gRPC edges copy it between payload and trailer.
// Thread-safety: stateless.
#ifndef PDSERVE_COMMON_RETRY_AFTER_H_
#define PDSERVE_COMMON_RETRY_AFTER_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pdserve {

// The gRPC trailer: milliseconds in decimal.
inline constexpr char kRetryAfterTrailer[] = "retry-after-ms";

// `status` with the hint attached (and " (retry after N ms)" appended to its message for
// people reading it).
absl::Status WithRetryAfter(absl::Status status, absl::Duration retry_after);
// The hint attached to `status`, if any.
std::optional<absl::Duration> RetryAfter(const absl::Status& status);
// The hint from a trailer's value; nullopt unless it is a non-negative integer.
std::optional<absl::Duration> ParseRetryAfterTrailer(const std::string& value);

}  // namespace pdserve

#endif  // PDSERVE_COMMON_RETRY_AFTER_H_
