// What the router learns from a request once its decode worker has finished it: the one
// learning rule, called by the relay (relay_call.cc) and by pdserve-sim, so that a policy
// measured in the simulator learns exactly what the product learns. (Engine steps are learned
// as they are reported: WorkerRegistry::Report.)
// Thread-safety: as CostModel's (locked inside).
#ifndef PDSERVE_ROUTER_LEARNING_H_
#define PDSERVE_ROUTER_LEARNING_H_

#include "common/worker_reports.h"
#include "router/cost_model.h"
#include "router/placer.h"

namespace pdserve::router {

// How the request was placed, as the learning needs it.
struct PlacementForLearning {
  int num_layers = 1;  // The model's KV layers (measured bytes -> one layer's).
  // The router's prediction of the last layer's bytes (for a worker that reports none).
  double estimated_last_layer_bytes = 0;
};

// What LearnFromOffload needs of the router's placement.
PlacementForLearning ForLearning(const PlacementResult& placed);

// A completed offload: the prefill worker's speed (the batch it computed over its compute
// time) and the transfer's tail per byte of the last layer. An outcome without a compute time
// teaches nothing.
void LearnFromOffload(const PrefillOutcome& outcome, const PlacementForLearning& placement,
                      CostModel* cost_model);

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_LEARNING_H_
