// The rebalancing planner's settings as flags (--rebalance_interval, --rebalance_min_between,
// --rebalance_confirm, --rebalance_high, --rebalance_margin,
// --rebalance_max_moves), shared by pdserve-router and
// pdserve-sim so that both run the planner with the same knobs and defaults.
#ifndef PDSERVE_ROUTER_REBALANCE_FLAGS_H_
#define PDSERVE_ROUTER_REBALANCE_FLAGS_H_

#include "router/rebalance_planner.h"

namespace pdserve::router {

RebalanceConfig RebalanceConfigFromFlags();

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_REBALANCE_FLAGS_H_
