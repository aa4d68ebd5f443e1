// File-descriptor budget of a server process: the soft RLIMIT_NOFILE raised to the hard limit
// at start, and the descriptor numbers past which a listener refuses new connections, so that a
// flood of clients cannot take the descriptors the process needs for its own work (outgoing
// channels, UCX, files) and accept() never reaches EMFILE in normal operation.
// Thread-safety: stateless functions; FdBudget is a value.
#ifndef PDSERVE_COMMON_FD_LIMITS_H_
#define PDSERVE_COMMON_FD_LIMITS_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace pdserve {

// Raises the soft RLIMIT_NOFILE to the hard limit (systemd and container runtimes often start
// processes at 1,024 under a much larger hard limit) and returns the soft limit now in force.
// Capped at 1 << 20: some kernels report an unlimited hard limit that select-era code and
// fd-indexed tables should not meet.
absl::StatusOr<int64_t> RaiseFileLimitToHard();

// The soft RLIMIT_NOFILE in force (1 << 20 if unlimited or larger).
int64_t CurrentFileLimit();

// Where a process with `limit` descriptors stops accepting. POSIX hands out the lowest free
// descriptor, so an accepted descriptor numbered N proves at least N + 1 are open: a listener
// that closes each connection whose descriptor is at or past its threshold keeps the rest free,
// whoever holds the others.
struct FdBudget {
  int64_t limit = 0;
  // Kept free of client connections for the process's own descriptors.
  int64_t reserve = 0;

  // limit / 8 within [32, 4096], and at most limit / 4.
  static FdBudget ForLimit(int64_t limit);
  // Threshold for the gRPC listener: every descriptor up to the reserve.
  int64_t grpc_refuse_at() const { return limit - reserve; }
  // Threshold for the HTTP listener, a second reserve lower: an HTTP flood leaves the gRPC
  // listener (health probes, workers' reports) a reserve of its own.
  int64_t http_refuse_at() const { return limit - 2 * reserve; }
};

}  // namespace pdserve

#endif  // PDSERVE_COMMON_FD_LIMITS_H_
