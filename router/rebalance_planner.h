// The router's rebalancing planner (--rebalance=on): from each decode worker's predicted step
// time (its streams and the KV positions they attend to, at the cost model's price) against
// the TPOT objective, and the prompts waiting to be prefilled (on prefill workers: queued
// tokens over measured throughput; on decode workers, chunked beside their streams: at the
// cost model's prefill price) against the TTFT objective, it decides when moving a
// role-switching worker from one role to the other pays, and which worker. Each role's
// pressure is its work spread over its workers (mean step time over TPOT; backlog per prefill
// worker over TTFT). Workers move to the busier role when the busier of the two is above
// `high` and the moves lower it by the fraction `margin` (the split follows the load without
// swinging around a balance), as many as bring the two roles nearest their balance (at most
// `max_moves` in one order), never leaving a role empty, only after a move was called for
// `confirm` looks in a row, and at most one order per `min_between`. The decode workers chosen
// are those that would drain soonest (their requests' remaining tokens at their step time;
// what has not started is handed back, but a started stream is waited for), then those with
// the fewest streams; the prefill workers those with the smallest backlogs. It moves workers
// between the two roles of a cluster that has both; it never creates a role (a cluster without
// prefill workers is a deliberate choice). The planner holds only its hysteresis state; the
// registry orders and checks the switch (WorkerRegistry::RequestSwitch). The simulator can run the
// same class. Thread-safety: one caller at a time.
#ifndef PDSERVE_ROUTER_REBALANCE_PLANNER_H_
#define PDSERVE_ROUTER_REBALANCE_PLANNER_H_

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
  // The least time between two switches it orders. Default 10 s.
  absl::Duration min_between = absl::Seconds(10);
  // Consecutive looks that must call for the same move. Default 2.
  int confirm = 2;
  // Nothing moves while both roles' pressures are below this (an idle cluster). Default 0.5.
  double high = 0.5;
  // A move must lower the busier role's pressure by this fraction. Default 0.1.
  double margin = 0.1;
  // The most workers one order moves (they drain and switch together). Default 1: on the
  // simulator's shifting mix (bench/README) moving several at once overshot, leaving one
  // worker of a role to take a new phase's first minute.
  int max_moves = 1;
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
  // Decode: how long until its longest request could end (each may run its max_tokens at the
  // worker's step time, less the time since the router relayed it): how long a switch would
  // wait for the streams it cannot hand back.
  double drain_s = 0;
};

struct PlannerSnapshot {
  std::vector<PlannerWorker> workers;  // One model's.
  SloConfig slo;                       // The objectives pressures are measured against.
};

// The snapshot of `model`'s workers at `now` (the registry's clock), under the registry's
// lock, as the placer reads them.
PlannerSnapshot SnapshotForPlanner(const std::vector<WorkerEntry*>& workers,
                                   const std::string& model, const CostModel& cost_model,
                                   const SloConfig& slo, absl::Time now);

struct RebalanceOrder {
  std::string worker_id;
  WorkerRole to = WorkerRole::kDecode;
  std::string reason;  // The pressures that decided it.
};

class RebalancePlanner {
 public:
  explicit RebalancePlanner(const RebalanceConfig& config) : config_(config) {}

  // One look at the cluster at `now`: the switches to order, all to the same role, when moving
  // pays; none otherwise. The caller orders them and calls Ordered() if the registry took any.
  std::vector<RebalanceOrder> Look(const PlannerSnapshot& snapshot, absl::Time now);
  void Ordered(absl::Time now) { last_order_ = now; }

  // Mean decode step time over the TPOT objective with the decode work spread over `workers`
  // decode workers; the prefill backlog (the prefill workers' and the decode workers' local
  // one) over the TTFT objective per prefill worker, with `workers` of them. Infinity for 0
  // workers with work to do.
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
