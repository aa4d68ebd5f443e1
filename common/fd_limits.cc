#include "common/fd_limits.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

constexpr rlim_t kMaxUsefulLimit = rlim_t{1} << 20;

}  // namespace

absl::StatusOr<int64_t> RaiseFileLimitToHard() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(absl::StrCat("getrlimit(RLIMIT_NOFILE): ", std::strerror(errno)));
  }
  const rlim_t wanted = std::min(limit.rlim_max, kMaxUsefulLimit);
  if (limit.rlim_cur < wanted) {
    rlimit raised = limit;
    raised.rlim_cur = wanted;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) return static_cast<int64_t>(wanted);
    // Not fatal: the process runs with what it was given.
  }
  return static_cast<int64_t>(limit.rlim_cur);
}

int64_t CurrentFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return static_cast<int64_t>(kMaxUsefulLimit);
  return static_cast<int64_t>(std::min(limit.rlim_cur, kMaxUsefulLimit));
}

FdBudget FdBudget::ForLimit(int64_t limit) {
  FdBudget budget;
  budget.limit = limit;
  // A tiny limit still leaves half of its descriptors to connections.
  budget.reserve = std::min(std::clamp<int64_t>(limit / 8, 32, 4096), limit / 4);
  return budget;
}

}  // namespace pdserve
