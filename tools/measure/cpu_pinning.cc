#include "tools/measure/cpu_pinning.h"

#include <sched.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pdserve::measure {

absl::Status PinThisThread(absl::string_view flag, const std::vector<int>& cpus) {
  if (cpus.empty()) return absl::OkStatus();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE)
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", cpu, " is not a CPU"));
    CPU_SET(cpu, &set);
  }
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": sched_setaffinity: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace pdserve::measure
