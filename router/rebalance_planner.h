// The router's rebalancing planner (--rebalance=on): from each decode worker's predicted step
// time (its streams and the KV positions they attend to, at the cost model's price) against
// the TPOT objective, and each prefill worker's backlog (queued prompt tokens over its
// measured throughput) against the TTFT objective, it decides when moving a role-switching
// worker from one role to the other pays, and which worker. A role is short when its pressure
// (mean step time over TPOT; mean backlog over TTFT) passes `high`; a worker moves to it only
// if the role that gives it up stays below `high - margin` once its work is spread over the
// workers left, never leaving a role empty, only after the same verdict held for `confirm`
// looks in a row (hysteresis), and at most once per `min_between` (rate limit). The decode
// worker chosen is the one with the fewest streams (the shortest drain), the prefill worker
// the one with the smallest backlog.
// Without prefill workers a decode worker's local prefill backlog (chunked prompt tokens not
// yet computed, at the cost model's prefill price) stands for the prefill role's pressure.
// The planner holds only its hysteresis state; the registry orders and checks the switch
// (WorkerRegistry::RequestSwitch). The simulator can run the same class.
// Thread-safety: one caller at a time.
#ifndef PDSERVE_ROUTER_REBALANCE_PLANNER_H_
#define PDSERVE_ROUTER_REBALANCE_PLANNER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "router/cost_model.h"
#include "router/placement/placement_policy.h"
#include "router/worker_registry.h"

namespace pdserve::router {

struct RebalanceConfig {
  // How often the planner looks. Default 2 s.
  absl::Duration interval = absl::Seconds(2);
  // The least time between two switches it orders. Default 60 s.
  absl::Duration min_between = absl::Seconds(60);
  // Consecutive looks that must see the same shortage. Default 3.
  int confirm = 3;
  // A role's pressure above this is a shortage. Default 0.8.
  double high = 0.8;
  // The giving role must stay below high - margin after the move. Default 0.25.
  double margin = 0.25;
  absl::Status Validate() const;
};

// One worker as the planner sees it.
struct PlannerWorker {
  std::string worker_id;
  WorkerRole role = WorkerRole::kDecode;
  bool can_switch = false;  // Registered with role_switching.
  bool accepting = false;   // Reported, not draining, not switching.
  int streams = 0;          // Decode: requests it holds.
  // Decode: predicted step time with every request it holds running, and its part that does
  // not depend on the requests (the step's fixed cost), ms.
  double step_ms = 0;
  double base_step_ms = 0;
  // Prefill: queued work in seconds; decode: its local prefill backlog in seconds.
  double backlog_s = 0;
};

struct PlannerSnapshot {
  std::vector<PlannerWorker> workers;  // One model's.
  SloConfig slo;                        // The objectives pressures are measured against.
};

// The snapshot of `model`'s workers (under the registry's lock, as the placer reads them).
PlannerSnapshot SnapshotForPlanner(const std::vector<WorkerEntry*>& workers,
                                   const std::string& model, const CostModel& cost_model,
                                   const SloConfig& slo);

struct RebalanceOrder {
  std::string worker_id;
  WorkerRole to = WorkerRole::kDecode;
  std::string reason;  // The pressures that decided it.
};

class RebalancePlanner {
 public:
  explicit RebalancePlanner(const RebalanceConfig& config) : config_(config) {}

  // One look at the cluster at `now`: an order when a switch pays (the caller orders it and
  // calls Ordered() if the registry took it).
  std::optional<RebalanceOrder> Look(const PlannerSnapshot& snapshot, absl::Time now);
  void Ordered(absl::Time now) { last_order_ = now; }

  // Mean decode step time over the TPOT objective with the decode work spread over `workers`
  // decode workers; mean prefill backlog over the TTFT objective over `workers` prefill
  // workers (the decode workers' local backlogs when it has none). Infinity for 0 workers
  // with work to do.
  static double DecodePressure(const PlannerSnapshot& s, int workers);
  static double PrefillPressure(const PlannerSnapshot& s, int workers);

 private:
  const RebalanceConfig config_;
  int short_prefill_looks_ = 0;
  int short_decode_looks_ = 0;
  absl::Time last_order_ = absl::InfinitePast();
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_REBALANCE_PLANNER_H_
