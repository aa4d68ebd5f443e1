// The serve benchmark's load: requests sent at their arrival times through the router's gRPC
// or OpenAI-compatible HTTP API, each timed at the client, and the rate points and goodput
// computed from their results against per-kind objectives.
// Thread-safety: RunLoad uses its own threads; the rest are pure functions.
#ifndef PDSERVE_BENCH_SERVE_LOAD_RUNNER_H_
#define PDSERVE_BENCH_SERVE_LOAD_RUNNER_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "text/tokenizer.h"
#include "tools/client/generation_client.h"
#include "tools/client/openai_stream.h"
#include "tools/measure/workload.h"

namespace pdserve::bench {

struct RequestResult {
  bool ok = false;
  std::string error;
  std::string kind;
  double ttft_ms = 0;
  double tpot_ms = 0;  // Mean time per output token after the first.
  std::vector<double> itl_ms;
  double e2e_ms = 0;
  bool offloaded = false;
  std::vector<int32_t> prompt;  // As sent.
  std::vector<int32_t> output;
};

// Latency objectives of one request kind: multiples of its unloaded latency.
struct Slo {
  double ttft_ms = 0;
  double tpot_ms = 0;
  double e2e_ms = 0;  // Unloaded median, for the rate scale.
};
using Slos = std::map<std::string, Slo>;  // By request kind.

// Where the load goes: the router's gRPC API, or (http set) its OpenAI-compatible HTTP API.
struct LoadTarget {
  std::shared_ptr<grpc::Channel> channel;
  std::string http;
  // Re-tokenizes HTTP answers (which carry text) for follow-up turns.
  const text::Tokenizer* tokenizer = nullptr;
};

// Sends one request (gRPC, or HTTP when `target.http` is set) and times it at the client.
RequestResult Send(const LoadTarget& target, std::vector<int32_t> prompt, int max_tokens,
                   const std::string& kind, const client::RequestObjectives& objectives);

// Sends `workload` at its arrival times (one thread per request in flight); a follow-up waits
// for the turn it continues and sends that turn's prompt + output + its new question.
// `sequential` sends them one after another instead. With `objectives`, each request carries
// its kind's.
std::vector<RequestResult> RunLoad(const LoadTarget& target,
                                   const std::vector<measure::WorkloadRequest>& workload,
                                   bool sequential, const Slos* objectives = nullptr);

// p50, p90 and p99 of `v` (zeros when empty).
nlohmann::json Percentiles(std::vector<double> v);
// One rate's point: requests, errors (by message), offloads, attainment, latency percentiles.
nlohmann::json RatePoint(const std::vector<RequestResult>& results, const Slos& slos, double rate);
// Highest rate with >= 90 % attainment, interpolated to the first rate below it.
double Goodput(const std::vector<nlohmann::json>& points);
// Goodput of each repeat (the points' attainment_runs in run order); one value per run, empty
// when the points were measured once.
std::vector<double> GoodputPerRun(const std::vector<nlohmann::json>& points);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_SERVE_LOAD_RUNNER_H_
