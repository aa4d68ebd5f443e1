// pdserve-sim's engine: a deterministic discrete-event simulation of a pdserve cluster in
// virtual time (one thread, no sleeping; the same inputs give the same outputs, bit for bit).
// It runs the product's own decision code: the router's worker registry, prefix index, cost
// model (with its online refinement from the load reports), placement policy and placer, and
// each decode worker's scheduler and block allocator (sim_decode_worker.h). Only the forward
// pass and the wire are modelled: step and prefill times from the profile's calibration, KV
// transfers over a link (sim_prefill_worker.h), every RPC a constant latency.
// With SimConfig::rebalance the router's own rebalancing planner moves workers between roles
// (router/rebalance_planner.h), each switch draining as the real worker's does.
// What it leaves out (the real cluster has them): retries after a worker fails, offload
// attempt timeouts, clients that stop reading, and the host time between engine steps.
// Thread-safety: Simulate() is reentrant (each call builds its own cluster).
#ifndef PDSERVE_SIM_SIMULATOR_H_
#define PDSERVE_SIM_SIMULATOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "router/placement/placement_policy.h"
#include "router/placer.h"
#include "router/rebalance_planner.h"
#include "sim/sim_profile.h"

namespace pdserve::sim {

struct SimRequest {
  double arrival_s = 0;
  // The prompt; a follow-up's is only its new question, sent after the turn it continues
  // ends, behind that turn's prompt and output (as the serve bench's client does).
  std::vector<int32_t> prompt;
  int max_tokens = 1;
  int follow_up_of = -1;
  std::string kind;  // For the report (e.g. chat, document, trace).
  // Its own objectives, sent with it; unset: the policy's default.
  std::optional<router::SloConfig> slo;
  // The SLO class those objectives came from (empty: none); attainment is also judged per
  // class (sim_summary.h).
  std::string slo_class;
  // Counted in the summary; false: load around the measured requests (steady_state.h).
  bool measured = true;
  // The schedule phase it arrives in (schedule.h; 0 otherwise): attainment is also judged per
  // phase, so that no configuration passes by giving up a phase.
  int phase = 0;
};

struct SimConfig {
  SimProfile profile;
  int decode_workers = 1;
  int prefill_workers = 0;
  router::PolicyConfig policy;
  router::PlacerConfig placer;
  // The router's cost model before it has learned anything; unset: the profile's timing
  // (the router calibrated on the same machine).
  std::optional<CostModelParams> router_prior;
  // One RPC hop (client -> router -> worker, worker -> worker, worker -> client), ms.
  double rpc_ms = 0.3;
  double report_interval_ms = 100;
  bool layerwise = true;
  // Step times vary around the calibration by a log-normal factor with this sigma (0: exact).
  double step_jitter = 0;
  // Host time a decode worker's engine loop spends around each forward (planning, sampling,
  // streaming, waking up), ms; the profile's formulas time the forward alone. 0: none (a
  // device whose host work is hidden). pdserve-sim validate calibrates it on the serve
  // bench's unloaded pass.
  double host_ms_per_step = 0;
  uint64_t seed = 1;
  // Arrival times are divided by this (2: the same requests at twice the rate).
  double rate_scale = 1;
  // Live rebalancing (the router's --rebalance=on, its own planner): every worker can switch
  // role; decode_workers and prefill_workers are the split it starts from. A switching worker
  // drains as the real one does (nothing new placed on it, what it holds finishes), then
  // registers in its new role one report interval later. Unset: roles are fixed.
  std::optional<router::RebalanceConfig> rebalance;

  absl::Status Validate() const;
};

struct SimRequestResult {
  bool ok = false;
  std::string error;
  std::string kind;
  double sent_ms = 0;  // When the client sent it (a follow-up: after its earlier turn).
  double ttft_ms = 0;
  double tpot_ms = 0;  // 0 with one output token.
  double e2e_ms = 0;
  bool offloaded = false;  // Its KV came from a prefill worker.
  bool fell_back = false;  // Placed to offload, prefilled locally (no KV blocks for it).
  std::string reason;      // The router's placement reason (short_prompt, ...).
  // The router's decision whole: its predictions (interference, offload cost, TTFTs) and the
  // running decodes it saw.
  router::Placement predicted;
  int prompt_tokens = 0;
  int output_tokens = 0;
  int decode_worker = -1;  // Its index.
  int cached_tokens = 0;   // The router's predicted prefix-cache hit.
  std::optional<router::SloConfig> slo;
  std::string slo_class;  // SimRequest::slo_class.
  bool measured = true;   // SimRequest::measured.
  int phase = 0;          // SimRequest::phase.
};

struct SimCounters {
  uint64_t events = 0;
  uint64_t steps = 0;
  uint64_t mixed_steps = 0;
  uint64_t preemptions = 0;
  uint64_t prefill_batches = 0;
  uint64_t offloaded = 0;
  uint64_t fallbacks = 0;
  // Requests a draining decode worker handed back to the router (or refused) to be placed
  // again (with rebalancing).
  uint64_t handed_back = 0;
  uint64_t rejected = 0;
  uint64_t prefix_hit_tokens = 0;
  uint64_t prefix_queried_tokens = 0;
  // At the end, over the decode workers: sequences still there and KV blocks still held
  // (in use, reserved or quarantined). Both 0 unless something leaks.
  uint64_t sequences_left = 0;
  uint64_t blocks_held_at_end = 0;
  double virtual_s = 0;
  uint64_t role_switches = 0;  // Completed (with rebalancing).
  // Ordered and still draining when the last request ended (a worker that never emptied:
  // 0 unless the simulation loses track of something).
  uint64_t role_switches_unfinished = 0;
};

// One role switch the router's planner ordered (with rebalancing), in virtual time.
struct SimRoleSwitch {
  int worker = 0;  // Its slot: worker-<worker>.
  router::WorkerRole to = router::WorkerRole::kDecode;
  double ordered_ms = 0;
  double done_ms = -1;  // Registered in its new role; -1: still draining at the end.
  std::string reason;   // The planner's (the pressures that decided it).
};

struct SimResult {
  std::vector<SimRequestResult> requests;
  SimCounters counters;
  std::vector<SimRoleSwitch> switches;  // In the order they were ordered.
};

absl::StatusOr<SimResult> Simulate(const SimConfig& config,
                                   const std::vector<SimRequest>& requests);

}  // namespace pdserve::sim

#endif  // PDSERVE_SIM_SIMULATOR_H_
