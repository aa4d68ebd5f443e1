// Histogram bucket edges shared by every pdserve process, so that dashboards can aggregate
// the same metric across router, decode and prefill workers.
// Thread-safety: stateless.
#ifndef PDSERVE_SERVER_METRIC_BUCKETS_H_
#define PDSERVE_SERVER_METRIC_BUCKETS_H_

#include "prometheus/histogram.h"

namespace pdserve {

// Latency buckets (seconds) dense where SLOs sit (10 ms - 2 s) and wide enough for long
// prompts on CPU.
prometheus::Histogram::BucketBoundaries LatencyBuckets();
// Inter-token latency buckets (seconds), 1 ms - 2.5 s.
prometheus::Histogram::BucketBoundaries InterTokenBuckets();
// Short host-side durations (seconds), 1 us - 100 ms: scheduling and decision overheads.
prometheus::Histogram::BucketBoundaries OverheadBuckets();

}  // namespace pdserve

#endif  // PDSERVE_SERVER_METRIC_BUCKETS_H_
