// pdserve-bench serve: serving under load, per placement policy, on the same two pinned cores:
// always_local runs two decode workers (one core each; local_decode_workers); always_offload,
// length_threshold and cost_model run one prefill and one decode worker. For each workload mix
// (chat, documents, mixed) a seeded Poisson rate sweep goes up to past the knee; each request's
// TTFT, TPOT, ITL and end-to-end latency are measured at the client; a request's SLOs are multiples
// of the unloaded latency of its kind (chat, document, follow-up): TTFT <= 10x, TPOT <= 5x; goodput
// is the highest rate at which at least 90 % of requests meet both (DistServe's definition,
// `vllm bench serve --goodput`). The router is told each mix's objectives. With api "openai"
// the load goes through the router's OpenAI-compatible HTTP front instead of gRPC.
// With a trace (trace_path) the sweep replays it instead: prompts with its lengths and shared
// prefixes, arrivals with its gaps, scaled to each rate; the objectives are multiples of the
// unloaded latency of its first requests. Each point may be measured several times (repeats).
// A probe per policy measures the running streams' TPOT p90 inflation under a 2048-token cold
// prefill (median of several injections). Results are resumable (one JSON per rate point).
#ifndef PDSERVE_BENCH_SERVE_SERVE_BENCH_H_
#define PDSERVE_BENCH_SERVE_SERVE_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/measure/trace.h"

namespace pdserve::bench {

struct ServeBenchConfig {
  std::string out_dir;
  // Model directory; empty: the tiny preset in models/tiny (quick) or small (full).
  std::string model_dir;
  std::vector<std::string> policies = {"always_local", "always_offload", "length_threshold",
                                       "cost_model"};
  std::vector<std::string> mixes = {"chat", "documents", "mixed"};
  // Rates as multiples of the mix's unloaded capacity (1 / its median end-to-end latency).
  std::vector<double> rate_multipliers = {0.5, 1, 2, 3, 4, 6, 8};
  int requests_per_rate = 80;
  // TPOT inflation probes per policy (the median is reported); 0: none.
  int probe_repetitions = 5;
  uint64_t seed = 2026;
  std::vector<int> cpus = {0, 1};
  // always_local's decode workers, on cpus round robin. One, with router_cpus on the other
  // core, gives a cluster whose worker shares its core with nothing (for the simulator's
  // validation: bench/README.md, sim).
  int local_decode_workers = 2;
  // CPUs for the router and for this process (the load generator and its client threads);
  // empty: unpinned, floating over every core.
  std::vector<int> router_cpus;
  // The workers' engine backend (--backend): cpu, cuda (GPU 0; offloads stage KV through
  // host memory), or emulated (profile's timing; docs/emulated.md).
  std::string backend = "cpu";
  // Backend emulated: the performance profile. Its cluster object gives the workers' batch
  // limits (--max_num_batched_tokens, --max_num_seqs, --max_batch_tokens) and it is the
  // router's cost model; with time_scale != 1 a copy with every time multiplied by it (and
  // the link's bandwidth divided) is written into out_dir and used instead: a slower machine
  // of the same shape, for running a cluster's load on fewer cores.
  std::string profile;
  double time_scale = 1;
  // The prefill and decode workers of the policies that offload (always_local runs
  // local_decode_workers). Default 1 and 1.
  int prefill_workers = 1;
  int decode_workers = 1;
  // Niceness of the prefill worker (policies with one): see pdctl's `nice`.
  int prefill_nice = 10;
  double ttft_slo_multiple = 10;
  double tpot_slo_multiple = 5;
  // Absolute objectives for every request kind instead (both > 0), ms; 0: the multiples.
  // They are the profile's hardware's: with time_scale they are multiplied by it too (the
  // same regime on the slower machine).
  double slo_ttft_ms = 0;
  double slo_tpot_ms = 0;
  // Rates in requests per second instead of multiples of the unloaded capacity (non-empty).
  std::vector<double> rates_per_s;
  // length_threshold's N (uncached tokens).
  int length_threshold = 1024;
  // Stop a policy's sweep after this many consecutive rates below 50 % attainment.
  int stop_after_failures = 2;
  // The API the load goes through: "grpc", or "openai" (the router's HTTP front; probes stay
  // on gRPC).
  std::string api = "grpc";
  // Rates measured after the sweep, each halving the interval between the highest passing
  // and the lowest failing rate (goodput's resolution).
  int bisect_steps = 2;
  // Each rate point is measured this many times (other seeds); its attainment is the median
  // run's, and goodput is reported as the median and the spread over the runs.
  int repeats = 1;
  // A production trace to replay instead of the mixes (tools/measure/trace.h): the selection
  // picks and scales it (max_context 0: the model's context); each rate point replays its
  // first requests_per_rate requests with their arrival gaps scaled to the rate.
  std::string trace_path;
  measure::TraceSelection trace;
  // The longest prompt plus output any request uses (the mixes' documents, a trace's requests,
  // the TPOT probe's cold prefill: at most half of it); 0: the model's context. Smaller keeps
  // the bench within reach of a slow machine.
  int max_context = 0;

  static ServeBenchConfig Quick();
  static ServeBenchConfig Full();
};

absl::Status RunServeBench(const ServeBenchConfig& config);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_SERVE_SERVE_BENCH_H_
