// Judging a configuration at steady state. Goodput (the highest rate at which a target share
// of requests meets its objectives) is a steady-state figure: at a rate above what the cluster
// sustains, a queue grows without end and sooner or later every request misses its TTFT. A
// trace window replayed once is a burst: its arrivals stop, the queue drains, and a burst
// that spans a few TTFT objectives is absorbed by the objective itself (an overload of x lets
// a queue of x * span build up: under 2 s for a 13 s burst at 15 % over capacity). The planner
// read such bursts as goodput: 29.6 requests/s per GPU on the Azure trace at 8 GPUs, where the
// same configuration met the objectives for 19 % of the trace's whole hour at that rate and
// the work alone bounds any configuration to 25.4 (bench/README.md, sim).
//
// SteadyStateRequests repeats the window end to end at a given rate multiple until the
// measured arrivals span `measure_s` seconds (whole windows, so every rate judges the same
// requests), preceded by `warmup_s` seconds of the window's end, or longer: the longest life
// of a request that meets its objectives (the cluster fills, the router's cost model and
// arrival rates settle), and followed by `cooldown_s` seconds of its
// start, or longer: until every measured request, sent as late as its objectives allow, would
// have ended meeting them (the last measured requests finish under load, not in a draining
// cluster; a request that ends later missed its objectives anyway); neither is measured. Each
// copy's tokens are shifted within the vocabulary, so copies share no prefix while each keeps its
// own sharing structure (a trace's common prefixes, follow-ups). Thread-safety: pure functions.
#ifndef PDSERVE_SIM_STEADY_STATE_H_
#define PDSERVE_SIM_STEADY_STATE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sim/simulator.h"

namespace pdserve::sim {

struct SteadyState {
  double warmup_s = 20;    // Virtual seconds of load before the measured requests (at least).
  double measure_s = 60;   // The measured arrivals span at least this (0: the window once,
                           // every request measured: a burst, not a steady state).
  double cooldown_s = 20;  // Virtual seconds of load after them (at least; see above).

  bool enabled() const { return measure_s > 0; }
  absl::Status Validate() const;
};

nlohmann::json ToJson(const SteadyState& s);

// `window` (arrivals in its own time, at least two distinct) as Simulate should run it at
// `multiple` times its rate (SimConfig::rate_scale = multiple): arrival_s stays in the
// window's time scale. Requests in the warm-up and cool-down have measured = false; a
// follow-up whose earlier turn was cut off with them is dropped. Tokens must lie in
// [0, vocab) (INVALID_ARGUMENT naming the request otherwise); a copy's are shifted modulo
// vocab. Without steady_state.enabled(): the window as is.
absl::StatusOr<std::vector<SimRequest>> SteadyStateRequests(const std::vector<SimRequest>& window,
                                                            double multiple,
                                                            const SteadyState& steady_state,
                                                            int vocab);

}  // namespace pdserve::sim

#endif  // PDSERVE_SIM_STEADY_STATE_H_
