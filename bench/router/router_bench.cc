#include "bench/router/router_bench.h"

#include <algorithm>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/router/relay_measure.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kvcache/block_hash.h"
#include "prometheus/registry.h"
#include "router/placer.h"
#include "server/child_process.h"
#include "tools/client/generation_client.h"
#include "tools/make_model/model_maker.h"
#include "tools/measure/report.h"

namespace pdserve::bench {

using measure::MachineInfo;
using measure::Mean;
using measure::Percentile;
using measure::Progress;
using measure::WriteSummary;
namespace {

constexpr uint64_t kFingerprint = 0x5eed;
constexpr int kBlockSize = 16;
constexpr int kVocab = 32000;

router::WorkerInfo Registration(int i, bool decode) {
  router::WorkerInfo r;
  r.worker_id = absl::StrCat(decode ? "decode-" : "prefill-", i);
  r.role = decode ? router::WorkerRole::kDecode : router::WorkerRole::kPrefill;
  r.grpc_address = absl::StrCat("10.0.", i / 250, ".", i % 250 + 1, ":50051");
  r.model = "bench";
  r.model_fingerprint = kFingerprint;
  r.kv_layout = KvLayout{.num_layers = 32,
                         .num_kv_heads = 8,
                         .head_dim = 128,
                         .block_size = kBlockSize,
                         .dtype = DType::kBF16,
                         .num_blocks = 20000};
  r.max_num_batched_tokens = 2048;
  r.max_num_seqs = 256;
  r.max_context_tokens = 32768;
  r.vocab_size = kVocab;
  return r;
}

struct DecisionResult {
  int workers = 0;
  double p50_us = 0;
  double p99_us = 0;
  double mean_us = 0;
};

// A registry of `workers` workers with populated prefix caches, and `decisions` placements of
// realistic prompts (most share one of a few hundred system prompts), timed one by one.
absl::StatusOr<DecisionResult> MeasureDecisions(int workers, int decisions) {
  prometheus::Registry prometheus;
  router::RouterMetrics metrics(prometheus);
  router::CostModel cost_model{CostModelParams()};
  FakeClock clock;
  router::WorkerRegistry registry(&clock, absl::Hours(1), &cost_model, &metrics);
  auto policy = router::MakePlacementPolicy(router::PolicyConfig());
  if (!policy.ok()) return policy.status();
  router::DecisionLog log(1000);
  router::PlacerConfig placer_config;
  placer_config.max_waiting_per_worker = 1 << 20;
  router::Placer placer(&registry, &cost_model, policy->get(), placer_config, &metrics, &log);
  router::CatalogModel model;
  model.name = "bench";

  std::mt19937 rng(workers);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % kVocab);
    return t;
  };
  constexpr int kSystemPrompts = 256;
  std::vector<std::vector<int32_t>> system_prompts;
  for (int i = 0; i < kSystemPrompts; ++i) system_prompts.push_back(random_tokens(512));
  const int num_decode = std::max(1, workers * 3 / 4);
  const int num_prefill = std::max(1, workers - num_decode);
  std::vector<uint64_t> sessions;
  for (int i = 0; i < num_decode + num_prefill; ++i) {
    ASSIGN_OR_RETURN(uint64_t s, registry.Register(Registration(i, i < num_decode)));
    sessions.push_back(s);
  }
  auto report_all = [&] {
    for (int i = 0; i < num_decode + num_prefill; ++i) {
      WorkerReport report;
      LoadSnapshot& load = report.load;
      load.running = static_cast<int>(rng() % 64);
      load.waiting = static_cast<int>(rng() % 4);
      load.free_blocks = 5000 + rng() % 10000;
      load.total_blocks = 20000;
      load.pending_prefill_tokens = rng() % 4096;
      load.prefill_tokens_per_second = 20000;
      registry.Report(sessions[i], report);
    }
  };
  report_all();
  // Each decode worker caches 24 system prompts and 1000 blocks of its own.
  for (int i = 0; i < num_decode; ++i) {
    router::PrefixCacheUpdate events;
    for (int k = 0; k < 24; ++k) {
      for (uint64_t h : kvcache::FullBlockHashes(
               kFingerprint, system_prompts[rng() % kSystemPrompts], kBlockSize)) {
        events.stored.push_back(h);
      }
    }
    for (uint64_t h : kvcache::FullBlockHashes(kFingerprint, random_tokens(16000), kBlockSize)) {
      events.stored.push_back(h);
    }
    registry.ApplyPrefix(sessions[i], events);
  }
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 1000; ++i) {
    std::vector<int32_t> p;
    if (rng() % 10 < 7) p = system_prompts[rng() % kSystemPrompts];
    const std::vector<int32_t> rest = random_tokens(100 + static_cast<int>(rng() % 3500));
    p.insert(p.end(), rest.begin(), rest.end());
    prompts.push_back(std::move(p));
  }
  std::vector<double> us;
  us.reserve(decisions);
  for (int i = 0; i < decisions; ++i) {
    if (i % 200 == 0) report_all();  // Workers report; dispatched counts reset.
    router::PlacementRequest request;
    request.request_id = "bench";
    request.model = &model;
    request.prompt = &prompts[i % prompts.size()];
    request.max_tokens = 256;
    const absl::Time start = absl::Now();
    auto placed = placer.Place(request);
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
    if (!placed.ok()) return placed.status();
  }
  DecisionResult r;
  r.workers = num_decode + num_prefill;
  r.p50_us = Percentile(us, 50);
  r.p99_us = Percentile(us, 99);
  r.mean_us = Mean(us);
  return r;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::string& binary,
                                                    std::vector<std::string> args) {
  ASSIGN_OR_RETURN(
      auto child,
      ChildProcess::Start(ChildOptions{
          .binary = binary, .args = std::move(args), .startup_timeout = absl::Minutes(5)}));
  if (absl::Status s = child->WaitHealthy(absl::Minutes(2)); !s.ok()) {
    return absl::UnavailableError(absl::StrCat(binary, ": ", s.message(), "\n", child->Log()));
  }
  return child;
}

}  // namespace

absl::Status RunRouterBench(const RouterBenchConfig& cfg) {
  if (cfg.out_dir.empty()) return absl::InvalidArgumentError("--out: required");
  nlohmann::json summary;
  summary["machine"] = MachineInfo();
  Table table({"measurement", "value", "baseline", "ratio"});

  // 1. Decision latency (no logging: a decision's log line is written after it is timed).
  const LogSeverity saved = MinLogSeverity();
  SetMinLogSeverity(LogSeverity::kWarning);
  nlohmann::json decisions = nlohmann::json::array();
  double p50_small = 0;
  for (int workers : cfg.cluster_sizes) {
    auto r = MeasureDecisions(workers, cfg.decisions);
    if (!r.ok()) {
      SetMinLogSeverity(saved);
      return r.status();
    }
    Progress("router", absl::StrCat("decision with ", r->workers, " workers: p50 ",
                                    Fixed(r->p50_us, 1), " us, p99 ", Fixed(r->p99_us, 1), " us"));
    decisions.push_back({{"workers", r->workers},
                         {"p50_us", r->p50_us},
                         {"p99_us", r->p99_us},
                         {"mean_us", r->mean_us}});
    if (p50_small == 0) p50_small = r->p50_us;
    table.AddRow(
        {absl::StrCat("decision, ", r->workers, " workers"),
         absl::StrCat("p50 ", Fixed(r->p50_us, 1), " us, p99 ", Fixed(r->p99_us, 1), " us"),
         absl::StrCat("p50 at ", cfg.cluster_sizes[0], " workers"),
         Fixed(r->p50_us / p50_small, 2) + "x"});
    if (workers == 64) {
      summary["decision_p50_us"] = r->p50_us;
      summary["decision_p99_us"] = r->p99_us;
    }
  }
  SetMinLogSeverity(saved);
  summary["decisions"] = decisions;

  // 2. Relay overhead through real processes.
  std::string dir = cfg.model_dir;
  if (dir.empty()) {
    dir = "models/small";
    ASSIGN_OR_RETURN(tools::ModelSpec spec, tools::ModelSpec::Preset("small"));
    RETURN_IF_ERROR(tools::EnsureModel(spec, dir));
  }
  Progress("router", "relay: starting pdserve-router and one pdserve-decode on " + dir);
  ASSIGN_OR_RETURN(auto router, Start("pdserve-router", {"--model=" + dir, "--log_level=warning"}));
  ASSIGN_OR_RETURN(
      auto decode,
      Start("pdserve-decode", {"--model=" + dir, "--router=" + router->grpc_address(),
                               "--kv_transport=none", "--log_level=warning", "--num_blocks=2048"}));
  const auto router_channel = client::MakeChannel(router->grpc_address(), GrpcSecurity());
  const auto decode_channel = client::MakeChannel(decode->grpc_address(), GrpcSecurity());
  // Wait until the router can place (the decode worker registered and reported).
  for (int i = 0;; ++i) {
    auto out =
        client::CallGenerate(router_channel, client::MakeRequest({1, 2, 3}, 2), absl::Seconds(30));
    if (out.status.ok()) break;
    if (i > 100)
      return absl::UnavailableError("the decode worker never registered with the router");
    absl::SleepFor(absl::Milliseconds(100));
  }
  RelayConfig relay;
  relay.rounds = cfg.relay_rounds;
  relay.streams = cfg.relay_streams;
  relay.tokens = cfg.relay_tokens;
  relay.ttft_requests = cfg.ttft_requests;
  ASSIGN_OR_RETURN(const RelayResult measured, MeasureRelay(router_channel, decode_channel, relay));
  const double itl_router = measured.itl_ms_router;
  const double itl_direct = measured.itl_ms_direct;
  const double ttft_router = measured.ttft_ms_router;
  const double ttft_direct = measured.ttft_ms_direct;
  summary["relay_itl_ms_router"] = itl_router;
  summary["relay_itl_ms_direct"] = itl_direct;
  summary["relay_itl_overhead"] = itl_router / itl_direct - 1.0;
  summary["relay_itl_p50_ms_router"] = measured.itl_p50_ms_router;
  summary["relay_itl_p50_ms_direct"] = measured.itl_p50_ms_direct;
  summary["relay_ttft_ms_router"] = ttft_router;
  summary["relay_ttft_ms_direct"] = ttft_direct;
  summary["relay_ttft_overhead_ms"] = ttft_router - ttft_direct;
  table.AddRow({"ITL through the router (mean)", Fixed(itl_router, 3) + " ms",
                Fixed(itl_direct, 3) + " ms direct", Fixed(itl_router / itl_direct, 3) + "x"});
  table.AddRow({"TTFT through the router (median, one at a time)", Fixed(ttft_router, 2) + " ms",
                Fixed(ttft_direct, 2) + " ms direct", Fixed(ttft_router / ttft_direct, 3) + "x"});
  const double p99 = summary.value("decision_p99_us", 0.0);
  const double overhead = summary["relay_itl_overhead"].get<double>();
  summary["targets"] = {{"decision_p99_us_max", 50},
                        {"relay_itl_overhead_max", 0.03},
                        {"decision_met", p99 > 0 && p99 <= 50},
                        {"relay_met", overhead <= 0.03}};
  std::printf("pdserve-bench router\n%s", table.ToString().c_str());
  std::printf(
      "targets: decision p99 <= 50 us at 64 workers: %s; relay ITL overhead <= 3%%: %s (%.2f%%)\n",
      p99 > 0 && p99 <= 50 ? "met" : "NOT met", overhead <= 0.03 ? "met" : "NOT met",
      100 * overhead);
  return WriteSummary(cfg.out_dir, summary);
}

}  // namespace pdserve::bench
