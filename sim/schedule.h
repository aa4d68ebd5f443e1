// Workloads whose regime changes: a schedule of phases, each a workload family cell
// (workload_family.h) at its own rate for its own time, one after the other. A shifting mix
// ("short/medium/none/poisson@40:600,long/tiny/none/poisson@8:600") changes what the traffic
// is; a rate swing ("X@10:1200,X@30:1200,X@10:1200") how much of it comes. Placement that
// adapts (and a prefill:decode split that changes with it) is judged on these: a fixed
// configuration must be sized for every phase at once.
// Thread-safety: pure functions.
#ifndef PDSERVE_SIM_SCHEDULE_H_
#define PDSERVE_SIM_SCHEDULE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/simulator.h"
#include "sim/workload_family.h"

namespace pdserve::sim {

struct SchedulePhase {
  WorkloadCell cell;
  double rate = 1;        // Requests per second (before the planner's rate multiple).
  double duration_s = 0;  // How long the phase lasts.
};

// "CELL@RATE:SECONDS,CELL@RATE:SECONDS,...": INVALID_ARGUMENT naming the phase and the part
// that is wrong (at least one phase; rates and durations > 0; at most 1,000,000 requests: phases
// that last as long at every rate multiple grow with it).
absl::StatusOr<std::vector<SchedulePhase>> ParseSchedule(const std::string& text);

// The phases' requests one after the other: phase i's cell at its rate for its duration
// (FamilyRequests' window, arrivals compressed by the rate), arrivals offset by the phases
// before it, SimRequest::phase = i. Deterministic in `seed`; each phase draws from its own.
std::vector<SimRequest> ScheduleRequests(const std::vector<SchedulePhase>& phases, uint64_t seed,
                                         int vocab, int max_context);

}  // namespace pdserve::sim

#endif  // PDSERVE_SIM_SCHEDULE_H_
