// Pins the calling thread, and every thread it starts afterwards, to a set of CPUs: a
// benchmark's load generator kept off the cores it gives to the process it measures (the
// router's own core, as in a deployment where the router has its pod).
#ifndef PDSERVE_TOOLS_MEASURE_CPU_PINNING_H_
#define PDSERVE_TOOLS_MEASURE_CPU_PINNING_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pdserve::measure {

// sched_setaffinity on the calling thread. `flag` names the option the CPUs came from, for the
// error: a CPU out of range or not available to this process is InvalidArgument. Empty
// `cpus`: nothing changes.
absl::Status PinThisThread(absl::string_view flag, const std::vector<int>& cpus);

}  // namespace pdserve::measure

#endif  // PDSERVE_TOOLS_MEASURE_CPU_PINNING_H_
