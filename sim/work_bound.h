// An upper bound on the goodput of any configuration, from the work alone: the rate at which
// a workload's compute fills every GPU of the cluster, on the profile's own timing, with
//   - every prompt prefilled once, after the longest prefix any earlier request shares with it
//     (a prefix cache that never forgets; a follow-up reuses its earlier turn whole), where
//     its prefill costs least (a decode worker's chunk or a prefill worker's forward);
//   - every output token after the first decoded at its per-token and attention cost;
//   - decode steps' fixed cost (the step intercept) paid as seldom as the TPOT objective
//     allows: a stream's steps take at most the objective on average, so on a GPU that
//     decodes at least intercept / TPOT of the time goes to fixed costs. Prefill-only GPUs
//     pay none.
// Placing the decode work on as few GPUs as it needs and the rest of the prefill on the others
// gives  rate <= GPUs * 1000 / (prefill_ms + decode_ms / (1 - intercept_share)).
// No configuration that serves every request it accepts sustains more; a goodput above it was
// measured on a burst, not a steady state (steady_state.h). The gap between a policy's goodput
// and the bound is what placement could still win.
// Thread-safety: pure function.
#ifndef PDSERVE_SIM_WORK_BOUND_H_
#define PDSERVE_SIM_WORK_BOUND_H_

#include <vector>

#include "sim/sim_profile.h"
#include "sim/simulator.h"

namespace pdserve::sim {

struct WorkBound {
  double prefill_ms = 0;       // Mean worker-milliseconds of prefill per request.
  double decode_ms = 0;        // Mean of decode, without the steps' fixed cost.
  double intercept_share = 0;  // Least share of a decoding worker's time its fixed costs take.
  double per_gpu = 0;          // Requests per second per GPU (0: the TPOT objective is
                               // below one step's fixed cost: no stream can meet it).
};

// Over `requests` (their own TPOT objectives, else `default_tpot_ms`; the loosest one sets the
// intercept share). When they span several schedule phases (SimRequest::phase), the bound is
// the least over phases of what each phase's work allows, in multiples of the whole timeline's
// mean rate: scaled by k, phase i offers k times its own rate r_i, which its work caps at B_i,
// so k <= min_i B_i / r_i. Under the bound's own relaxation (each prefill where it costs
// least, local chunks included) a split that changes with the phases allows no more than a
// fixed one: a fixed split loses to the work only through what the bound does not price
// (chunked prefill's interference with the running streams).
WorkBound ComputeWorkBound(const std::vector<SimRequest>& requests, const SimProfile& profile,
                           double default_tpot_ms);

}  // namespace pdserve::sim

#endif  // PDSERVE_SIM_WORK_BOUND_H_
