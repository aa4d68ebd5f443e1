// What the placer decided for one request, in domain terms: the decode worker, LOCAL or
// OFFLOAD with the prefill workers to try in order, why, and the cost model's predictions.
// router_wire.h turns it into the v1::Placement that the decode worker and the client see.
// Thread-safety: plain value types.
#ifndef PDSERVE_ROUTER_PLACEMENT_DECISION_H_
#define PDSERVE_ROUTER_PLACEMENT_DECISION_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace pdserve::router {

// A worker the decision names, as the decode worker must reach it.
struct WorkerRef {
  std::string worker_id;
  std::string address;
};

struct Placement {
  WorkerRef decode;
  bool offload = false;
  // OFFLOAD: the prefill workers to try, primary first.
  std::vector<WorkerRef> prefill;
  std::string reason;
  std::string policy;
  double predicted_interference_ms = 0;
  double predicted_offload_cost_ms = 0;
  double predicted_ttft_local_ms = 0;
  double predicted_ttft_offload_ms = 0;
  int uncached_tokens = 0;  // U on the chosen decode worker.
  int running_decodes = 0;  // D on the chosen decode worker.
};

// One decision as the decision log keeps it.
struct DecisionRecord {
  std::string request_id;
  std::string model;
  int prompt_tokens = 0;
  Placement placement;
  absl::Time time;
  double decision_us = 0;
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_PLACEMENT_DECISION_H_
