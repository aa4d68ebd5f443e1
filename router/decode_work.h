// What a decode worker holds, as the router prices it: its requests (as last reported plus
// those dispatched since), the KV positions their decode steps attend to, and the cost model's
// price of one more stream and one more position. The placer balances decode workers by it
// (--decode_balance=work); the rebalancing planner measures the decode role's pressure by it.
// Thread-safety: plain functions; entries are read under the registry's lock.
#ifndef PDSERVE_ROUTER_DECODE_WORK_H_
#define PDSERVE_ROUTER_DECODE_WORK_H_

#include <cstdint>

#include "router/cost_model.h"
#include "router/worker_registry.h"

namespace pdserve::router {

// Requests on the worker: running, waiting, awaiting KV, and dispatched since its report.
int DecodeLoad(const WorkerEntry& e);

// The KV positions a decode worker's steps attend to once every request it holds runs: as it
// last reported (a worker that does not report it: its streams at the attention per decode
// of its latest decode-only step), plus the prompts dispatched to it since.
double DecodeContext(const WorkerEntry& e);

// What one more stream, and one more KV position attended to, add to a decode step of the
// model (the cost model's current fit, never negative).
struct DecodeWorkPrice {
  double per_stream_ms = 0;
  double per_position_ms = 0;
};
DecodeWorkPrice PriceDecodeWork(const CostModel& cost_model, uint64_t fingerprint);

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_DECODE_WORK_H_
