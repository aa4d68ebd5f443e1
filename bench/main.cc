// pdserve-bench: pdserve's benchmarks, one subcommand each. Every subcommand prints progress
// on stderr, a table on stdout, and writes summary.json (plus per-run files) under --out.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "bench/chaos/chaos_bench.h"
#include "bench/decode/decode_bench.h"
#include "bench/engine/engine_bench.h"
#include "bench/fleet/fleet_bench.h"
#include "bench/http/http_bench.h"
#include "bench/interference/interference_bench.h"
#include "bench/router/router_bench.h"
#include "bench/serve/serve_bench.h"
#include "bench/soak/soak_bench.h"
#include "bench/transfer/transfer_bench.h"
#include "bench/transfer/transfer_raw_bench.h"
#include "common/flags.h"

ABSL_FLAG(std::string, out, "", "Directory for summary.json and per-run results (required).");
ABSL_FLAG(std::string, model, "", "Model directory; empty uses the bench's default preset.");
ABSL_FLAG(std::vector<std::string>, threads, {},
          "engine: thread counts to measure (default 1,all).");
ABSL_FLAG(int, decode_steps, 16, "engine: timed decode steps per batch size.");
ABSL_FLAG(std::vector<std::string>, decode_batches, {},
          "engine: decode batch sizes (default 1,4,8,16,32,64).");
ABSL_FLAG(std::vector<std::string>, prefill_tokens, {},
          "engine: prefill lengths (default 512,2048).");
ABSL_FLAG(
    std::string, weight_dtype, "auto",
    "engine: how the model keeps its weights (auto = the checkpoint's dtype, f32, bf16, f16).");
ABSL_FLAG(int, decode_context, 128,
          "engine: the tokens each decoding sequence holds (the KV positions a decode step's "
          "attention reads).");
ABSL_FLAG(std::string, kv_dtype, "f32",
          "engine: the KV cache's element type (f32, f16, bf16), as the workers' --kv_dtype.");
ABSL_FLAG(int, prefill_repetitions, 3, "engine: repetitions per prefill length.");
ABSL_FLAG(std::string, cpu_isa, "auto",
          "engine: the CPU kernels' instruction set (auto, avx512, avx2, scalar), as the workers' "
          "--cpu_isa: run once per set to compare them on one machine.");
ABSL_FLAG(std::string, backend, "cpu",
          "engine, transfer, interference, serve: cpu, or cuda (GPU 0; engine: decode eager vs "
          "CUDA graphs per batch size, the HBM floor, prefill vs cuBLAS; the others pass it to "
          "the workers they start).");
ABSL_FLAG(std::vector<std::string>, transports, std::vector<std::string>({"shm", "tcp"}),
          "transfer-raw: UCX transports to measure (UCX_TLS values); transfer: the first is used.");
ABSL_FLAG(bool, perftest, true, "transfer-raw: also run ucx_perftest as the baseline.");
ABSL_FLAG(int, repetitions, 0,
          "Repetitions (0: the subcommand's default): transfer-raw per-layer transfers (40); "
          "interference "
          "runs per configuration (5, as seed 002 asks).");
ABSL_FLAG(std::vector<std::string>, widths, std::vector<std::string>({"8", "64", "256"}),
          "decode: running-sequence counts for the overhead measurement.");
ABSL_FLAG(int, steps, 20, "decode: measured steps per width.");
ABSL_FLAG(std::vector<std::string>, prompt_lengths,
          std::vector<std::string>({"512", "2048", "8192"}),
          "transfer: prompt lengths of the offloaded requests.");
ABSL_FLAG(int, requests, 3,
          "transfer: requests per prompt length and mode (three times as many for P <= 1024, a "
          "third for P >= 8192).");
ABSL_FLAG(int, decisions, 20000, "router: timed placement decisions per cluster size.");
ABSL_FLAG(int, fleet_requests, 2000,
          "fleet: requests placed through the router for the decision latency.");
ABSL_FLAG(int, workers, 256, "fleet: emulated decode worker processes.");
ABSL_FLAG(std::string, profile, "deploy/profiles/h100-llama3-8b.json",
          "fleet, and serve with --backend=emulated: the emulated workers' performance profile.");
ABSL_FLAG(double, time_scale, 1,
          "serve --backend=emulated: every time of the profile multiplied by this (its link's "
          "bandwidth divided): a slower machine of the same shape, to run a cluster's load on "
          "fewer cores (the profile used is written into --out).");
ABSL_FLAG(int, prefill_workers, 1, "serve: prefill workers of the policies that offload.");
ABSL_FLAG(int, length_threshold, pdserve::bench::ServeBenchConfig{}.length_threshold,
          "serve: length_threshold's N (uncached prompt tokens at which it offloads).");
ABSL_FLAG(int, decode_workers, 1, "serve: decode workers of the policies that offload.");
ABSL_FLAG(double, slo_ttft_ms, 0,
          "serve: every request's TTFT objective, ms (with --slo_tpot_ms; 0: multiples of the "
          "unloaded latency); with --time_scale, the profile's own hardware's (multiplied by it).");
ABSL_FLAG(double, slo_tpot_ms, 0, "serve: every request's TPOT objective, ms (see --slo_ttft_ms).");
ABSL_FLAG(std::vector<std::string>, rates_per_s, {},
          "serve: request rates in requests per second (instead of --rates' multiples).");
ABSL_FLAG(absl::Duration, idle_window, absl::Seconds(30),
          "fleet: how long the idle footprint is sampled over.");
ABSL_FLAG(bool, full, false, "interference/serve: the full grid instead of the quick one.");
ABSL_FLAG(std::vector<std::string>, d, {},
          "interference: running decodes D to measure (overrides the grid).");
ABSL_FLAG(std::vector<std::string>, p, {},
          "interference: cold prefill lengths P (overrides the grid).");
ABSL_FLAG(std::vector<std::string>, chunks, {}, "interference: chunk sizes (overrides the grid).");
ABSL_FLAG(int, context_tokens, 512, "interference: warm context of the background decode streams.");
ABSL_FLAG(std::vector<std::string>, cpus, {},
          "interference: CPUs to pin the decode worker to; fleet: the workers' and the load "
          "generator's CPUs (with --router_cpus: a router with cores of its own).");
ABSL_FLAG(double, transfer_cost_ms, 0,
          "interference: offload cost on the break-even plot (0: from the fit).");
ABSL_FLAG(std::vector<std::string>, policies, {},
          "serve: placement policies to compare (default all four).");
ABSL_FLAG(std::vector<std::string>, mixes, {},
          "serve: workload mixes (default chat,documents,mixed).");
ABSL_FLAG(
    std::vector<std::string>, rates, {},
    "serve: request rates as multiples of the mix's unloaded capacity (default 0.5,1,2,3,4,6,8).");
ABSL_FLAG(int, local_decode_workers, 2,
          "serve: always_local's decode workers (on --cpus round robin).");
ABSL_FLAG(std::vector<std::string>, router_cpus, {},
          "serve: CPUs for the router and the load generator (empty: unpinned); fleet: the "
          "router's alone.");
ABSL_FLAG(int, prefill_nice, 10,
          "serve: niceness of the prefill worker (0..19; 0: as the decode workers).");
ABSL_FLAG(int, bisect_steps, -1,
          "serve: rates bisected between the highest passing and lowest failing one (-1: 2 quick, "
          "4 full).");
ABSL_FLAG(int, probe_repetitions, 5,
          "serve: TPOT inflation probes per policy (the median is reported).");
ABSL_FLAG(int, repeats, 1,
          "serve: measurements per rate point (the median run stands for it; goodput's median and "
          "spread over runs are reported).");
ABSL_FLAG(
    std::string, trace, "",
    "serve: replay this production trace (bench/traces/: Azure CSV or Mooncake JSONL) instead "
    "of the mixes.");
ABSL_FLAG(double, trace_start, 0, "serve: the trace window's start, seconds into the trace.");
ABSL_FLAG(double, trace_duration, 0,
          "serve: the trace window's length in seconds (0: to the end).");
ABSL_FLAG(bool, trace_spread_ties, true,
          "serve: spread requests that share a timestamp until the next arrival (Mooncake's "
          "timestamps are quantized to ~3 s: replayed as is, each clump is a burst).");
ABSL_FLAG(double, trace_length_scale, 1,
          "serve: prompt, output and prefix-block lengths multiplied by this (a smaller model or "
          "machine than production's).");
ABSL_FLAG(
    int, max_context, 0,
    "serve: the longest prompt plus output of any request (mixes, trace, the TPOT probe's "
    "cold prefill at most half of it), at least 512; 0: the model's context. Lower it on a slow "
    "machine.");
ABSL_FLAG(int, requests_per_rate, 0, "serve: requests per rate point (0: 80 quick, 150 full).");
ABSL_FLAG(std::string, api, "grpc",
          "serve: the API the load goes through: grpc, or openai (the router's HTTP front).");
ABSL_FLAG(int, runs, 3, "http: repeated runs (the summary gives their median and spread).");
ABSL_FLAG(int, pairs, 100, "http: alternating gRPC/HTTP request pairs per run.");
ABSL_FLAG(int, idle_connections, 2000,
          "http: streaming requests held waiting on open connections (0: skip).");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(60),
          "soak, chaos: how long the traffic and faults run.");
ABSL_FLAG(int, clients, 8, "soak, chaos: client threads issuing requests back to back.");
ABSL_FLAG(absl::Duration, fault_interval, absl::Seconds(8),
          "soak, chaos: interval between injected faults (chaos: after the previous one ended).");
ABSL_FLAG(uint64_t, chaos_seed, 7, "chaos: seed of the fault schedule, the traffic and its pool.");
ABSL_FLAG(bool, netns, false,
          "chaos: run the cluster across hosts (a network namespace per process, mutual TLS, UCX "
          "over TCP) and add partitions, 1-5% loss and 100 Mbit/s links to the faults. Needs "
          "root; exits 77 (skipped) where network namespaces cannot be made.");
ABSL_FLAG(std::string, descriptor, "", "transfer-raw-sender (internal): receiver descriptor.");
ABSL_FLAG(std::string, tls, "", "transfer-raw-sender (internal): UCX transports.");
ABSL_FLAG(std::string, net_devices, "", "transfer-raw-sender (internal): UCX network devices.");

namespace {

constexpr char kUsage[] =
    "pdserve-bench: benchmarks that print a table and write summary.json.\n"
    "Usage: pdserve-bench SUBCOMMAND --out=DIR [flags]\n"
    "Subcommands:\n"
    "  engine        decode step time by batch and prefill throughput vs bandwidth/sgemm floors\n"
    "  transfer      offloaded TTFT breakdown, layer-wise streaming vs bulk, through real workers\n"
    "  transfer-raw  KV-shaped UCX transfers (shm, TCP) vs ucx_perftest and memcpy\n"
    "  decode        scheduler host overhead per step; continuous serving vs a static batch\n"
    "  router        placement decision latency by cluster size; relay overhead (ITL, TTFT) vs "
    "direct\n"
    "  fleet         a router and --workers emulated decode processes: registration, idle "
    "footprint, decisions, relay, a SIGKILLed worker\n"
    "  interference  prefill/decode interference table, fitted cost_model.json, heatmap and "
    "break-even plots\n"
    "  serve         Poisson load per placement policy and mix: SLO attainment, goodput, latency "
    "percentiles\n"
    "  soak          mixed traffic, cancellations and injected faults for --duration: back at "
    "baseline, flat memory\n"
    "  chaos         mixed traffic under a seeded schedule of kills (router included, supervised) "
    "and pauses (--netns: across hosts, with partitions, loss and slow links): every stream's "
    "tokens equal its solo reference, typed errors within deadlines, no abort, back at "
    "baseline\n"
    "  http          the OpenAI-compatible HTTP front vs gRPC on one cluster (TTFT, ITL ratios); "
    "memory of held SSE streams";

// Parses a comma-separated list of non-negative integers given to `flag`.
bool Ints(const char* flag, const std::vector<std::string>& values, std::vector<int>* out) {
  out->clear();
  for (const std::string& v : values) {
    int n;
    if (!absl::SimpleAtoi(v, &n) || n < 0) {
      std::fprintf(stderr, "--%s: '%s' is not a non-negative integer\n", flag, v.c_str());
      return false;
    }
    out->push_back(n);
  }
  return true;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args = pdserve::ParseCommandLine(argc, argv, kUsage);
  if (args.size() != 2) {
    std::fprintf(stderr, "%s\n", kUsage);
    return 2;
  }
  const std::string& command = args[1];
  if (command == "engine") {
    pdserve::bench::EngineBenchConfig config;
    config.model_dir = absl::GetFlag(FLAGS_model);
    config.out_dir = absl::GetFlag(FLAGS_out);
    config.weight_dtype = absl::GetFlag(FLAGS_weight_dtype);
    config.kv_dtype = absl::GetFlag(FLAGS_kv_dtype);
    config.backend = absl::GetFlag(FLAGS_backend);
    config.cpu_isa = absl::GetFlag(FLAGS_cpu_isa);
    for (const std::string& t : absl::GetFlag(FLAGS_threads)) {
      int n;
      if (!absl::SimpleAtoi(t, &n) || n < 1) {
        std::fprintf(stderr, "--threads: '%s' is not a positive integer\n", t.c_str());
        return 2;
      }
      config.thread_counts.push_back(n);
    }
    config.decode_steps = absl::GetFlag(FLAGS_decode_steps);
    config.decode_context = absl::GetFlag(FLAGS_decode_context);
    if (config.decode_context < 1) {
      std::fprintf(stderr, "--decode_context: must be at least 1, got %d\n", config.decode_context);
      return 2;
    }
    config.prefill_repetitions = absl::GetFlag(FLAGS_prefill_repetitions);
    if (!absl::GetFlag(FLAGS_decode_batches).empty() &&
        !Ints("decode_batches", absl::GetFlag(FLAGS_decode_batches), &config.decode_batches))
      return 2;
    if (!absl::GetFlag(FLAGS_prefill_tokens).empty() &&
        !Ints("prefill_tokens", absl::GetFlag(FLAGS_prefill_tokens), &config.prefill_lengths))
      return 2;
    const absl::Status status = pdserve::bench::RunEngineBench(config);
    return status.ok() ? 0 : Fail(status);
  }
  if (command == "decode") {
    pdserve::bench::DecodeBenchConfig config;
    config.model_dir = absl::GetFlag(FLAGS_model);
    config.out_dir = absl::GetFlag(FLAGS_out);
    config.steps = absl::GetFlag(FLAGS_steps);
    config.widths.clear();
    for (const std::string& w : absl::GetFlag(FLAGS_widths)) {
      int n;
      if (!absl::SimpleAtoi(w, &n) || n < 1) {
        std::fprintf(stderr, "--widths: '%s' is not a positive integer\n", w.c_str());
        return 2;
      }
      config.widths.push_back(n);
    }
    const absl::Status status = pdserve::bench::RunDecodeBench(config);
    return status.ok() ? 0 : Fail(status);
  }
  if (command == "serve") {
    pdserve::bench::ServeBenchConfig config = absl::GetFlag(FLAGS_full)
                                                  ? pdserve::bench::ServeBenchConfig::Full()
                                                  : pdserve::bench::ServeBenchConfig::Quick();
    config.out_dir = absl::GetFlag(FLAGS_out);
    config.model_dir = absl::GetFlag(FLAGS_model);
    config.backend = absl::GetFlag(FLAGS_backend);
    if (!absl::GetFlag(FLAGS_policies).empty()) config.policies = absl::GetFlag(FLAGS_policies);
    if (!absl::GetFlag(FLAGS_mixes).empty()) config.mixes = absl::GetFlag(FLAGS_mixes);
    if (!absl::GetFlag(FLAGS_rates).empty()) {
      config.rate_multipliers.clear();
      for (const std::string& r : absl::GetFlag(FLAGS_rates)) {
        double v;
        if (!absl::SimpleAtod(r, &v) || v <= 0) {
          std::fprintf(stderr, "--rates: '%s' is not a positive number\n", r.c_str());
          return 2;
        }
        config.rate_multipliers.push_back(v);
      }
    }
    if (absl::GetFlag(FLAGS_requests_per_rate) > 0)
      config.requests_per_rate = absl::GetFlag(FLAGS_requests_per_rate);
    if (absl::GetFlag(FLAGS_probe_repetitions) < 0) {
      std::fprintf(stderr, "--probe_repetitions: must be >= 0\n");
      return 2;
    }
    for (const std::string& r : absl::GetFlag(FLAGS_rates_per_s)) {
      double v;
      if (!absl::SimpleAtod(r, &v) || v <= 0) {
        std::fprintf(stderr, "--rates_per_s: '%s' is not a positive number\n", r.c_str());
        return 2;
      }
      config.rates_per_s.push_back(v);
    }
    if (config.backend == "emulated") config.profile = absl::GetFlag(FLAGS_profile);
    config.time_scale = absl::GetFlag(FLAGS_time_scale);
    config.prefill_workers = absl::GetFlag(FLAGS_prefill_workers);
    config.length_threshold = absl::GetFlag(FLAGS_length_threshold);
    if (config.length_threshold < 1) {
      std::fprintf(stderr, "--length_threshold: must be >= 1\n");
      return 2;
    }
    config.decode_workers = absl::GetFlag(FLAGS_decode_workers);
    config.slo_ttft_ms = absl::GetFlag(FLAGS_slo_ttft_ms);
    config.slo_tpot_ms = absl::GetFlag(FLAGS_slo_tpot_ms);
    config.probe_repetitions = absl::GetFlag(FLAGS_probe_repetitions);
    if (absl::GetFlag(FLAGS_bisect_steps) > 8) {
      std::fprintf(stderr, "--bisect_steps: must be <= 8\n");
      return 2;
    }
    if (absl::GetFlag(FLAGS_bisect_steps) >= 0)
      config.bisect_steps = absl::GetFlag(FLAGS_bisect_steps);
    if (absl::GetFlag(FLAGS_prefill_nice) < 0 || absl::GetFlag(FLAGS_prefill_nice) > 19) {
      std::fprintf(stderr, "--prefill_nice: must be in [0, 19]\n");
      return 2;
    }
    config.prefill_nice = absl::GetFlag(FLAGS_prefill_nice);
    config.repeats = absl::GetFlag(FLAGS_repeats);
    config.trace_path = absl::GetFlag(FLAGS_trace);
    config.trace.start_s = absl::GetFlag(FLAGS_trace_start);
    config.trace.duration_s = absl::GetFlag(FLAGS_trace_duration);
    config.trace.length_scale = absl::GetFlag(FLAGS_trace_length_scale);
    config.max_context = absl::GetFlag(FLAGS_max_context);
    config.trace.spread_ties = absl::GetFlag(FLAGS_trace_spread_ties);
    config.api = absl::GetFlag(FLAGS_api);
    if (config.api != "grpc" && config.api != "openai") {
      std::fprintf(stderr, "--api: '%s' is not grpc or openai\n", config.api.c_str());
      return 2;
    }
    if (!absl::GetFlag(FLAGS_cpus).empty() &&
        !Ints("cpus", absl::GetFlag(FLAGS_cpus), &config.cpus))
      return 2;
    if (!absl::GetFlag(FLAGS_router_cpus).empty() &&
        !Ints("router_cpus", absl::GetFlag(FLAGS_router_cpus), &config.router_cpus))
      return 2;
    config.local_decode_workers = absl::GetFlag(FLAGS_local_decode_workers);
    const absl::Status status = pdserve::bench::RunServeBench(config);
    return status.ok() ? 0 : Fail(status);
  }
  if (command == "http") {
    pdserve::bench::HttpBenchConfig config;
    config.out_dir = absl::GetFlag(FLAGS_out);
    config.model_dir = absl::GetFlag(FLAGS_model);
    config.runs = absl::GetFlag(FLAGS_runs);
    config.requests = absl::GetFlag(FLAGS_pairs);
    config.idle_connections = absl::GetFlag(FLAGS_idle_connections);
    if (config.idle_connections < 0) {
      std::fprintf(stderr, "--idle_connections: must be >= 0\n");
      return 2;
    }
    if (!absl::GetFlag(FLAGS_cpus).empty() &&
        !Ints("cpus", absl::GetFlag(FLAGS_cpus), &config.cpus))
      return 2;
    const absl::Status status = pdserve::bench::RunHttpBench(config);
    return status.ok() ? 0 : Fail(status);
  }
  if (command == "soak") {
    pdserve::bench::SoakBenchConfig config;
    config.out_dir = absl::GetFlag(FLAGS_out);
    config.model_dir = absl::GetFlag(FLAGS_model);
    config.duration = absl::GetFlag(FLAGS_duration);
    config.clients = absl::GetFlag(FLAGS_clients);
    config.fault_interval = absl::GetFlag(FLAGS_fault_interval);
    const absl::Status status = pdserve::bench::RunSoakBench(config);
    return status.ok() ? 0 : Fail(status);
  }
  if (command == "chaos") {
    pdserve::bench::ChaosBenchConfig config;
    config.out_dir = absl::GetFlag(FLAGS_out);
    config.model_dir = absl::GetFlag(FLAGS_model);
    config.duration = absl::GetFlag(FLAGS_duration);
    config.clients = absl::GetFlag(FLAGS_clients);
    config.fault_interval = absl::GetFlag(FLAGS_fault_interval);
    config.seed = absl::GetFlag(FLAGS_chaos_seed);
    config.netns = absl::GetFlag(FLAGS_netns);
    const absl::Status status = pdserve::bench::RunChaosBench(config);
    // 77: what CTest's SKIP_RETURN_CODE and automake take for "cannot run here".
    if (absl::IsUnimplemented(status)) {
      Fail(status);
      return 77;
    }
    return status.ok() ? 0 : Fail(status);
  }
  if (command == "interference") {
    pdserve::bench::InterferenceBenchConfig config =
        absl::GetFlag(FLAGS_full) ? pdserve::bench::InterferenceBenchConfig::Full()
                                  : pdserve::bench::InterferenceBenchConfig::Quick();
    config.out_dir = absl::GetFlag(FLAGS_out);
    config.model_dir = absl::GetFlag(FLAGS_model);
    config.backend = absl::GetFlag(FLAGS_backend);
    std::vector<int> list;
    if (!absl::GetFlag(FLAGS_d).empty()) {
      if (!Ints("d", absl::GetFlag(FLAGS_d), &list)) return 2;
      config.decode_counts = list;
    }
    if (!absl::GetFlag(FLAGS_p).empty()) {
      if (!Ints("p", absl::GetFlag(FLAGS_p), &list)) return 2;
      config.prefill_tokens = list;
    }
    if (!absl::GetFlag(FLAGS_chunks).empty()) {
      if (!Ints("chunks", absl::GetFlag(FLAGS_chunks), &list)) return 2;
      config.chunk_sizes = list;
    }
    if (!Ints("cpus", absl::GetFlag(FLAGS_cpus), &config.cpus)) return 2;
    if (absl::GetFlag(FLAGS_repetitions) > 0) config.repetitions = absl::GetFlag(FLAGS_repetitions);
    if (!absl::GetFlag(FLAGS_threads).empty()) {
      if (!Ints("threads", absl::GetFlag(FLAGS_threads), &list)) return 2;
      config.threads = list[0];
    }
    config.context_tokens = absl::GetFlag(FLAGS_context_tokens);
    config.transfer_cost_ms = absl::GetFlag(FLAGS_transfer_cost_ms);
    const absl::Status status = pdserve::bench::RunInterferenceBench(config);
    return status.ok() ? 0 : Fail(status);
  }
  if (command == "router") {
    pdserve::bench::RouterBenchConfig config;
    config.out_dir = absl::GetFlag(FLAGS_out);
    config.model_dir = absl::GetFlag(FLAGS_model);
    config.decisions = absl::GetFlag(FLAGS_decisions);
    if (config.decisions < 100) {
      std::fprintf(stderr, "--decisions: must be >= 100\n");
      return 2;
    }
    const absl::Status status = pdserve::bench::RunRouterBench(config);
    return status.ok() ? 0 : Fail(status);
  }
  if (command == "fleet") {
    pdserve::bench::FleetBenchConfig config;
    config.out_dir = absl::GetFlag(FLAGS_out);
    config.model_dir = absl::GetFlag(FLAGS_model);
    config.profile = absl::GetFlag(FLAGS_profile);
    config.decode_workers = absl::GetFlag(FLAGS_workers);
    config.idle_window = absl::GetFlag(FLAGS_idle_window);
    config.decisions = absl::GetFlag(FLAGS_fleet_requests);
    if (!Ints("router_cpus", absl::GetFlag(FLAGS_router_cpus), &config.router_cpus) ||
        !Ints("cpus", absl::GetFlag(FLAGS_cpus), &config.worker_cpus))
      return 2;
    if (config.decisions < 100) {
      std::fprintf(stderr, "--fleet_requests: must be >= 100\n");
      return 2;
    }
    const absl::Status status = pdserve::bench::RunFleetBench(config);
    return status.ok() ? 0 : Fail(status);
  }
  if (command == "transfer") {
    pdserve::bench::TransferBenchConfig config;
    config.out_dir = absl::GetFlag(FLAGS_out);
    config.model_dir = absl::GetFlag(FLAGS_model);
    config.backend = absl::GetFlag(FLAGS_backend);
    config.repetitions = absl::GetFlag(FLAGS_requests);
    config.transport =
        absl::GetFlag(FLAGS_transports).empty() ? "shm" : absl::GetFlag(FLAGS_transports)[0];
    config.prompt_lengths.clear();
    for (const std::string& p : absl::GetFlag(FLAGS_prompt_lengths)) {
      int n;
      if (!absl::SimpleAtoi(p, &n) || n < 1) {
        std::fprintf(stderr, "--prompt_lengths: '%s' is not a positive integer\n", p.c_str());
        return 2;
      }
      config.prompt_lengths.push_back(n);
    }
    if (config.prompt_lengths.empty()) {
      std::fprintf(stderr, "--prompt_lengths: must not be empty\n");
      return 2;
    }
    const absl::Status status = pdserve::bench::RunTransferBench(config);
    return status.ok() ? 0 : Fail(status);
  }
  if (command == "transfer-raw") {
    pdserve::bench::TransferRawConfig config;
    config.out_dir = absl::GetFlag(FLAGS_out);
    config.self_path = argv[0];
    config.transports = absl::GetFlag(FLAGS_transports);
    config.run_perftest = absl::GetFlag(FLAGS_perftest);
    if (absl::GetFlag(FLAGS_repetitions) > 0)
      config.layer_repetitions = absl::GetFlag(FLAGS_repetitions);
    const absl::Status status = pdserve::bench::RunTransferRawBench(config);
    return status.ok() ? 0 : Fail(status);
  }
  if (command == "transfer-raw-sender") {
    const absl::Status status = pdserve::bench::RunTransferRawSender(
        absl::GetFlag(FLAGS_descriptor), absl::GetFlag(FLAGS_tls),
        absl::GetFlag(FLAGS_net_devices));
    return status.ok() ? 0 : Fail(status);
  }
  std::fprintf(stderr, "unknown subcommand '%s'\n%s\n", command.c_str(), kUsage);
  return 2;
}
