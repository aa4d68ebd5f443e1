#include "server/metric_buckets.h"

namespace pdserve {

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75,  1.0,  1.5,  2.0,  3.0,  5.0,  7.5, 10.0, 20.0, 40.0, 80.0};
}

prometheus::Histogram::BucketBoundaries InterTokenBuckets() {
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
          0.075, 0.1,    0.15,  0.2,    0.3,  0.4,   0.5,  0.75,  1.0,  2.5};
}

prometheus::Histogram::BucketBoundaries OverheadBuckets() {
  return {1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 1e-1};
}

}  // namespace pdserve
