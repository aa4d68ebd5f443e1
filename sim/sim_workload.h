// The simulator's workloads, from the serve bench's own generators so that a simulation and a
// real run see the same requests: a production trace (tools/measure/trace.h: its arrivals,
// lengths and shared prefix blocks) or a seeded synthetic mix (tools/measure/workload.h).
// Thread-safety: pure functions.
#ifndef PDSERVE_SIM_SIM_WORKLOAD_H_
#define PDSERVE_SIM_SIM_WORKLOAD_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/simulator.h"
#include "tools/measure/trace.h"
#include "tools/measure/workload.h"

namespace pdserve::sim {

// Every request of `trace` at its own arrival times (kind "trace"), prompts from
// measure::PromptTokens (equal prefix block ids are equal tokens).
std::vector<SimRequest> TraceRequests(const measure::Trace& trace, int vocab, uint64_t seed);

// The serve bench's workload requests, each with its kind's objectives when `objectives` has
// them.
std::vector<SimRequest> WorkloadRequests(
    const std::vector<measure::WorkloadRequest>& workload,
    const std::map<std::string, router::SloConfig>& objectives);

// A class of objectives in a workload that mixes several (an interactive and a batch tier).
struct SloClass {
  std::string name;
  router::SloConfig slo;
  double share = 1;  // Of the requests (normalised over the classes).
};

// "NAME:TTFT_MS:TPOT_MS:SHARE,..." e.g. "interactive:1000:25:0.5,batch:10000:100:0.5";
// INVALID_ARGUMENT naming `flag` and the part at fault.
absl::StatusOr<std::vector<SloClass>> ParseSloClasses(const std::string& spec,
                                                      const std::string& flag = "slo_classes");

// Gives each request a class drawn by share (deterministic in `seed`) and its objectives; a
// follow-up keeps its conversation's.
void AssignSloClasses(const std::vector<SloClass>& classes, uint64_t seed,
                      std::vector<SimRequest>* requests);

// Offered requests per second of `requests` (count over the span of their arrivals; 0 for
// fewer than two).
double OfferedRate(const std::vector<SimRequest>& requests);

}  // namespace pdserve::sim

#endif  // PDSERVE_SIM_SIM_WORKLOAD_H_
