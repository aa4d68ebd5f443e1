// pdserve-bench router: (1) placement decision latency in process, with 2 to 256 registered
// workers whose prefix caches are populated, to show that a decision's work does not grow
// with the cluster beyond its candidates; (2) relay overhead through real processes: the same
// concurrent streams sent through pdserve-router and straight to the decode worker,
// alternately, comparing inter-token latency; and single requests one at a time, comparing
// TTFT.
#ifndef PDSERVE_BENCH_ROUTER_ROUTER_BENCH_H_
#define PDSERVE_BENCH_ROUTER_ROUTER_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pdserve::bench {

struct RouterBenchConfig {
  std::string out_dir;
  // Model for the relay measurement; empty: the "small" preset in models/small.
  std::string model_dir;
  // Cluster sizes for the decision latency (the summary's decision_p99_us is at 64).
  std::vector<int> cluster_sizes = {2, 16, 64, 256};
  int decisions = 20000;
  // Relay: rounds of `streams` concurrent streams of `tokens` tokens, each round through the
  // router and directly.
  int relay_rounds = 4;
  int relay_streams = 4;
  int relay_tokens = 48;
  // Sequential requests per path for the TTFT comparison.
  int ttft_requests = 10;
};

absl::Status RunRouterBench(const RouterBenchConfig& config);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_ROUTER_ROUTER_BENCH_H_
