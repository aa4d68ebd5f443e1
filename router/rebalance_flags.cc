#include "router/rebalance_flags.h"

#include "absl/flags/flag.h"
#include "absl/time/time.h"

ABSL_FLAG(absl::Duration, rebalance_interval, pdserve::router::RebalanceConfig{}.interval,
          "Rebalancing: how often the planner looks.");
ABSL_FLAG(absl::Duration, rebalance_min_between, pdserve::router::RebalanceConfig{}.min_between,
          "Rebalancing: the least time between two switches the planner orders.");
ABSL_FLAG(int, rebalance_confirm, pdserve::router::RebalanceConfig{}.confirm,
          "Rebalancing: consecutive looks that must call for the same move.");
ABSL_FLAG(double, rebalance_high, pdserve::router::RebalanceConfig{}.high,
          "Rebalancing: nothing moves while both roles' pressures (decode: predicted step time "
          "over the TPOT objective; prefill: backlog per prefill worker over the TTFT "
          "objective) are below this.");
ABSL_FLAG(double, rebalance_margin, pdserve::router::RebalanceConfig{}.margin,
          "Rebalancing: a move must lower the busier role's pressure by this fraction.");
ABSL_FLAG(int, rebalance_max_moves, pdserve::router::RebalanceConfig{}.max_moves,
          "Rebalancing: the most workers one order moves to the other role (as many as bring "
          "the two roles' pressures nearest each other, up to this).");

namespace pdserve::router {

RebalanceConfig RebalanceConfigFromFlags() {
  return RebalanceConfig{.interval = absl::GetFlag(FLAGS_rebalance_interval),
                         .min_between = absl::GetFlag(FLAGS_rebalance_min_between),
                         .confirm = absl::GetFlag(FLAGS_rebalance_confirm),
                         .high = absl::GetFlag(FLAGS_rebalance_high),
                         .margin = absl::GetFlag(FLAGS_rebalance_margin),
                         .max_moves = absl::GetFlag(FLAGS_rebalance_max_moves)};
}

}  // namespace pdserve::router
