// pdserve-bench http: the OpenAI-compatible HTTP front against the gRPC API, side by side on
// one cluster (router + one decode worker, pinned cores), and what held-open SSE connections
// cost the router.
//
// Overhead: requests alternate between the two APIs in seeded random order, one at a time, with
// distinct random token prompts (no prefix-cache hits); TTFT (the first event or message that
// carries text) and inter-token latency (gaps between such events or messages) are measured at
// the client the same way for both. Each run reports HTTP/gRPC ratios of the medians; the
// summary gives the median and the spread over runs.
//
// Idle connections: with the decode worker's one running slot held by a long stream, N
// streaming requests wait in its queue over N open HTTP connections; the router's RSS growth
// over N is the memory one waiting SSE stream costs (its HTTP connection, the in-process gRPC
// call, the relay and its downstream call). Then the slot is freed and every waiting request
// must complete. The same N idle keep-alive connections (no request) give the HTTP
// connection's own share.
#ifndef PDSERVE_BENCH_HTTP_HTTP_BENCH_H_
#define PDSERVE_BENCH_HTTP_HTTP_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pdserve::bench {

struct HttpBenchConfig {
  std::string out_dir;
  // Model directory; empty: the tiny preset in models/tiny.
  std::string model_dir;
  int runs = 3;
  // Requests per API per run.
  int requests = 100;
  int prompt_tokens = 64;
  int max_tokens = 32;
  // Held-open streaming connections (0: skip that part).
  int idle_connections = 2000;
  uint64_t seed = 2026;
  // The router on the first, the decode worker on the second; the client floats.
  std::vector<int> cpus = {0, 1};
};

absl::Status RunHttpBench(const HttpBenchConfig& config);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_HTTP_HTTP_BENCH_H_
