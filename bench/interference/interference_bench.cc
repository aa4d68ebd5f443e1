#include "bench/interference/interference_bench.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/interference/interference_analysis.h"
#include "common/model_config.h"
#include "common/status_macros.h"
#include "router/cost_model.h"
#include "server/child_process.h"
#include "tools/client/generation_client.h"
#include "tools/make_model/model_maker.h"
#include "tools/measure/bench_model.h"
#include "tools/measure/report.h"

namespace pdserve::bench {

using measure::BenchModel;
using measure::LoadBenchModel;
using measure::MachineInfo;
using measure::Mean;
using measure::Percentile;
using measure::Progress;
using measure::WriteJson;
using measure::WriteSummary;
namespace {

// One background decode stream: the server-side emit time and token count of every message.
class BackgroundStream {
 public:
  struct Event {
    int64_t unix_nanos;
    int tokens;
  };
  void Start(std::shared_ptr<grpc::Channel> channel, v1::DecodeRequest request) {
    thread_ = std::thread([this, channel, request] {
      client::CallDecode(
          channel, request, absl::Minutes(10),
          [this](const v1::GenerateResponse& m) {
            if (m.token_ids_size() == 0) return;
            absl::MutexLock lock(&mu_);
            events_.push_back({m.time_unix_nanos(), m.token_ids_size()});
          },
          &handle_);
      finished_.store(true);
    });
  }
  bool finished() const { return finished_.load(); }
  std::vector<Event> Events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  void Stop() {
    handle_.Cancel();
    if (thread_.joinable()) thread_.join();
  }
  ~BackgroundStream() { Stop(); }

 private:
  client::CallHandle handle_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
  mutable absl::Mutex mu_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
};

// Per-token gaps (ms) of a stream whose ending message falls in (from, to].
void GapsIn(const std::vector<BackgroundStream::Event>& e, int64_t from, int64_t to,
            std::vector<double>* out) {
  for (size_t i = 1; i < e.size(); ++i) {
    if (e[i].unix_nanos <= from || e[i].unix_nanos > to) continue;
    const double gap = (e[i].unix_nanos - e[i - 1].unix_nanos) / 1e6 / e[i].tokens;
    for (int t = 0; t < e[i].tokens; ++t) out->push_back(gap);
  }
}

int TokensAfter(const std::vector<BackgroundStream::Event>& e, int64_t from) {
  int n = 0;
  for (const auto& ev : e) n += ev.unix_nanos > from ? ev.tokens : 0;
  return n;
}

// Steady state as the seed defines it: every stream past the warm-up, and its last 8
// inter-token gaps within 2x of each other.
bool Steady(const std::vector<std::unique_ptr<BackgroundStream>>& streams, int warmup) {
  for (const auto& s : streams) {
    const auto e = s->Events();
    int tokens = 0;
    for (const auto& ev : e) tokens += ev.tokens;
    if (tokens < warmup + 8 || e.size() < 9) return false;
    double lo = 1e18;
    double hi = 0;
    for (size_t i = e.size() - 8; i < e.size(); ++i) {
      const double gap = double(e[i].unix_nanos - e[i - 1].unix_nanos) / e[i].tokens;
      lo = std::min(lo, gap);
      hi = std::max(hi, gap);
    }
    if (hi > 2 * lo) return false;
  }
  return true;
}

absl::StatusOr<v1::DecodeStats> Stats(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = v1::Decode::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::DecodeStats stats;
  const grpc::Status s = stub->GetStats(&ctx, v1::GetStatsRequest(), &stats);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("GetStats: ", s.error_message()));
  return stats;
}

v1::DecodeRequest Request(const std::vector<int32_t>& prompt, int max_tokens) {
  v1::DecodeRequest r;
  *r.mutable_request() = client::MakeRequest(prompt, max_tokens);
  r.mutable_request()->mutable_sampling()->set_ignore_eos(true);
  return r;
}

bool WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

struct Harness {
  const InterferenceBenchConfig& cfg;
  std::shared_ptr<grpc::Channel> channel;
  std::vector<int32_t> shared_prefix;
  int vocab = 0;
  int stream_tokens = 0;
};

// Whether every stream has emitted at least `tokens` tokens after `since_nanos`.
bool EveryStreamHas(const std::vector<std::unique_ptr<BackgroundStream>>& streams,
                    int64_t since_nanos, int tokens) {
  for (const auto& s : streams) {
    if (TokensAfter(s->Events(), since_nanos) < tokens) return false;
  }
  return true;
}

// `attempt` > 0 when a repetition is measured again: its prompt must differ from the first
// attempt's, whose KV the worker's prefix cache now holds.
absl::StatusOr<InterferenceRun> RunOne(const Harness& h, int chunk, int d, int p, int rep,
                                       int attempt) {
  const InterferenceBenchConfig& cfg = h.cfg;
  InterferenceRun run;
  run.chunk = chunk;
  run.decode = d;
  run.prefill_tokens = p;
  run.repetition = rep;
  run.chunks_expected = (p + std::max(1, chunk - d) - 1) / std::max(1, chunk - d);
  std::vector<std::unique_ptr<BackgroundStream>> streams;
  // Streams long enough to outlast the run on a fast model; they are cancelled at its end.
  const int stream_tokens = h.stream_tokens;
  for (int i = 0; i < d; ++i) {
    streams.push_back(std::make_unique<BackgroundStream>());
    streams.back()->Start(h.channel, Request(h.shared_prefix, stream_tokens));
  }
  auto stop_all = [&] {
    for (auto& s : streams) s->Stop();
  };
  int64_t t0 = absl::ToUnixNanos(absl::Now());
  int64_t t1 = t0;
  if (d > 0) {
    auto any_finished = [&] {
      for (const auto& s : streams) {
        if (s->finished()) return true;
      }
      return false;
    };
    if (!WaitFor([&] { return Steady(streams, cfg.warmup_tokens) || any_finished(); },
                 absl::Minutes(2)) ||
        any_finished()) {
      stop_all();
      return absl::DeadlineExceededError(
          absl::StrCat("D=", d, ": background streams never reached steady state"));
    }
    for (const auto& s : streams) t0 = std::max(t0, s->Events().back().unix_nanos);
    if (!WaitFor([&] { return EveryStreamHas(streams, t0, cfg.baseline_tokens); },
                 absl::Minutes(2))) {
      stop_all();
      return absl::DeadlineExceededError("baseline window never completed");
    }
    std::vector<double> baseline;
    for (const auto& s : streams) {
      const auto e = s->Events();
      t1 = std::max(t1, e.back().unix_nanos);
    }
    for (const auto& s : streams) GapsIn(s->Events(), t0, t1, &baseline);
    run.tpot_baseline_p50_ms = Percentile(baseline, 50);
    run.tpot_baseline_p90_ms = Percentile(baseline, 90);
    run.tpot_baseline_p99_ms = Percentile(baseline, 99);
  }
  ASSIGN_OR_RETURN(v1::DecodeStats before, Stats(h.channel));
  // The cold prefill: unique tokens, one output token.
  std::mt19937 rng(
      static_cast<uint32_t>(chunk * 1000003 + d * 10007 + p * 101 + rep + attempt * 7919));
  std::vector<int32_t> prompt(p);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % h.vocab);
  const int64_t inject = absl::ToUnixNanos(absl::Now());
  int64_t emitted = 0;  // The worker's emit time of the prefill's token.
  const client::GenerationOutcome out = client::CallDecode(
      h.channel, Request(prompt, 1), absl::Minutes(10), [&](const v1::GenerateResponse& m) {
        if (m.token_ids_size() > 0 && emitted == 0) emitted = m.time_unix_nanos();
      });
  if (!out.status.ok() || !out.has_result || emitted == 0) {
    stop_all();
    return absl::InternalError(absl::StrCat("injected prefill: ", out.status.error_message()));
  }
  // Tokens the background streams got in the step that finished the prefill are emitted
  // within microseconds of it; the next step is milliseconds away.
  const int64_t first = emitted + 500'000;
  run.prefill_duration_ms = out.result.timings().ttft_ms();
  // The worker publishes its counters after the step that emitted the token: wait until they
  // include the injected request's end.
  v1::DecodeStats after;
  for (int i = 0;; ++i) {
    ASSIGN_OR_RETURN(after, Stats(h.channel));
    if (after.requests_finished_total() > before.requests_finished_total() || i >= 200) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  run.chunks_actual =
      static_cast<int>(after.prefill_chunks_total() - before.prefill_chunks_total());
  run.mixed_steps = static_cast<int>(after.mixed_steps_total() - before.mixed_steps_total());
  if (d > 0) {
    if (!WaitFor([&] { return EveryStreamHas(streams, first, cfg.after_tokens); },
                 absl::Minutes(2))) {
      stop_all();
      return absl::DeadlineExceededError("recovery window never completed");
    }
    std::vector<double> during;
    std::vector<double> recovery;
    int generated = 0;
    for (const auto& s : streams) {
      const auto e = s->Events();
      GapsIn(e, inject, first, &during);
      GapsIn(e, first, std::numeric_limits<int64_t>::max(), &recovery);
      for (const auto& ev : e) generated += ev.unix_nanos <= inject ? ev.tokens : 0;
    }
    if (during.empty()) {
      // The whole prefill fit between two decode tokens: the step that carried it is the
      // first gap ending after the injection.
      for (const auto& s : streams) {
        const auto e = s->Events();
        for (size_t i = 1; i < e.size(); ++i) {
          if (e[i].unix_nanos > inject) {
            during.push_back((e[i].unix_nanos - e[i - 1].unix_nanos) / 1e6 / e[i].tokens);
            break;
          }
        }
      }
    }
    run.tpot_during_p50_ms = Percentile(during, 50);
    run.tpot_during_p90_ms = Percentile(during, 90);
    run.tpot_during_mean_ms = Mean(during);
    // The delay itself: every running stream's gaps in the window beyond its baseline.
    for (double gap : during) run.window_delay_ms += std::max(0.0, gap - run.tpot_baseline_p50_ms);
    run.tpot_after_p50_ms = Percentile(recovery, 50);
    run.decode_context = h.shared_prefix.size() + static_cast<double>(generated) / d;
  }
  stop_all();
  return run;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> StartWorker(const InterferenceBenchConfig& cfg,
                                                          const std::string& dir, int chunk,
                                                          int blocks) {
  ChildOptions o;
  o.binary = "pdserve-decode";
  o.args = {"--model=" + dir,
            absl::StrCat("--threads=", cfg.threads),
            "--kv_transport=none",
            "--backend=" + cfg.backend,
            absl::StrCat("--max_num_batched_tokens=", chunk),
            absl::StrCat("--num_blocks=", blocks),
            "--max_num_seqs=128",
            "--log_level=warning"};
  o.cpus = cfg.cpus;
  o.startup_timeout = absl::Minutes(5);
  ASSIGN_OR_RETURN(auto child, ChildProcess::Start(o));
  if (absl::Status s = child->WaitHealthy(absl::Minutes(2)); !s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("pdserve-decode: ", s.message(), "\n", child->Log()));
  }
  return child;
}

std::string ProgressBar(int done, int total, absl::Duration elapsed) {
  constexpr int kWidth = 30;
  const int filled = total == 0 ? kWidth : done * kWidth / total;
  std::string bar = "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "]";
  const absl::Duration eta = done == 0 ? absl::ZeroDuration() : elapsed * (total - done) / done;
  return absl::StrCat(bar, " ", done, "/", total, ", ETA ",
                      absl::FormatDuration(absl::Trunc(eta, absl::Seconds(1))));
}

}  // namespace

InterferenceBenchConfig InterferenceBenchConfig::Quick() {
  InterferenceBenchConfig c;
  c.decode_counts = {0, 1, 2, 4, 8};
  c.prefill_tokens = {256, 512, 1024, 2048};
  c.chunk_sizes = {256, 1024};
  c.repetitions = 5;  // The seed's protocol: CV over 5 repetitions per configuration.
  return c;
}

InterferenceBenchConfig InterferenceBenchConfig::Full() {
  InterferenceBenchConfig c;
  c.decode_counts = {0, 1, 2, 4, 8, 16};
  c.prefill_tokens = {256, 512, 1024, 2048, 4096, 8192};
  c.chunk_sizes = {256, 512, 1024, 2048};
  c.repetitions = 5;
  return c;
}

absl::Status RunInterferenceBench(const InterferenceBenchConfig& cfg) {
  if (cfg.out_dir.empty()) return absl::InvalidArgumentError("--out: required");
  if (cfg.decode_counts.empty() || cfg.prefill_tokens.empty() || cfg.chunk_sizes.empty()) {
    return absl::InvalidArgumentError("--d, --p and --chunks: each needs at least one value");
  }
  if (cfg.repetitions < 1) return absl::InvalidArgumentError("--repetitions: must be >= 1");
  ASSIGN_OR_RETURN(const BenchModel loaded, LoadBenchModel(cfg.model_dir, "small", "interference"));
  const std::string& dir = loaded.dir;
  const ModelConfig& model = loaded.config;
  const int max_d = *std::max_element(cfg.decode_counts.begin(), cfg.decode_counts.end());
  const int max_p = *std::max_element(cfg.prefill_tokens.begin(), cfg.prefill_tokens.end());
  const int min_chunk = *std::min_element(cfg.chunk_sizes.begin(), cfg.chunk_sizes.end());
  if (max_d >= min_chunk) {
    return absl::InvalidArgumentError(
        absl::StrCat("--d: ", max_d, " decodes leave no room in a chunk of ", min_chunk));
  }
  const int needed = cfg.warmup_tokens + cfg.baseline_tokens + cfg.after_tokens + 72 +
                     (max_p + min_chunk - max_d - 1) / (min_chunk - max_d);
  const int stream_tokens = std::min(2048, model.max_position_embeddings - cfg.context_tokens - 2);
  if (stream_tokens < needed || max_p + 2 > model.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("--p / --context_tokens: exceed the model's context of ",
                     model.max_position_embeddings, " tokens"));
  }
  const int blocks = (max_d * (cfg.context_tokens + stream_tokens) + max_p + 64) / 16 + 64;
  const std::string results = cfg.out_dir + "/results";
  std::filesystem::create_directories(results);

  Harness h{cfg, nullptr, {}, model.vocab_size, stream_tokens};
  std::mt19937 prefix_rng(2026);
  h.shared_prefix.resize(cfg.context_tokens);
  for (auto& t : h.shared_prefix) t = static_cast<int32_t>(prefix_rng() % model.vocab_size);

  const int total = static_cast<int>(cfg.chunk_sizes.size() * cfg.decode_counts.size() *
                                     cfg.prefill_tokens.size()) *
                    cfg.repetitions;
  int done = 0;
  int resumed = 0;
  const absl::Time start = absl::Now();
  std::vector<InterferenceRun> runs;
  int remeasured = 0;
  for (int chunk : cfg.chunk_sizes) {
    std::unique_ptr<ChildProcess> worker;  // Started only when a run of this chunk is missing.
    auto measure = [&](int d, int p, int rep, int attempt,
                       const std::string& path) -> absl::StatusOr<InterferenceRun> {
      if (!worker) {
        Progress("interference", absl::StrCat("starting pdserve-decode with chunk ", chunk));
        ASSIGN_OR_RETURN(worker, StartWorker(cfg, dir, chunk, blocks));
        h.channel = client::MakeChannel(worker->grpc_address(), GrpcSecurity());
      }
      ASSIGN_OR_RETURN(InterferenceRun run, RunOne(h, chunk, d, p, rep, attempt));
      std::filesystem::create_directories(absl::StrCat(results, "/", chunk));
      RETURN_IF_ERROR(WriteJson(path, run.ToJson()));
      return run;
    };
    for (int d : cfg.decode_counts) {
      for (int p : cfg.prefill_tokens) {
        std::vector<InterferenceRun> config_runs;
        std::vector<std::string> paths;
        for (int rep = 0; rep < cfg.repetitions; ++rep) {
          const std::string path =
              absl::StrCat(results, "/", chunk, "/D", d, "_P", p, "_r", rep, ".json");
          paths.push_back(path);
          std::ifstream existing(path);
          if (existing) {
            nlohmann::json j = nlohmann::json::parse(existing, nullptr, false);
            auto run = j.is_discarded()
                           ? absl::StatusOr<InterferenceRun>(absl::DataLossError("bad json"))
                           : InterferenceRun::FromJson(j);
            if (run.ok()) {
              config_runs.push_back(*run);
              ++done;
              ++resumed;
              continue;
            }
          }
          ASSIGN_OR_RETURN(InterferenceRun run, measure(d, p, rep, 0, path));
          config_runs.push_back(run);
          ++done;
          Progress("interference", absl::StrCat(ProgressBar(done, total, absl::Now() - start),
                                                "  chunk=", chunk, " D=", d, " P=", p, " rep=", rep,
                                                ": TPOT ", Fixed(run.tpot_baseline_p50_ms), " -> ",
                                                Fixed(run.tpot_during_p50_ms), " ms, prefill ",
                                                Fixed(run.prefill_duration_ms, 1), " ms in ",
                                                run.chunks_actual, " chunks"));
        }
        // A repetition whose decode-only baseline is far from the configuration's median
        // ran on a disturbed machine (a shared VM's neighbours, not the system under test),
        // and one whose chunk count is not ceil(P / chunk budget) did not run the protocol:
        // it is measured again, a bounded number of times per configuration. The criteria
        // look at the baseline and the chunk count, never at the interference measured.
        for (int attempt = 0; attempt < cfg.max_remeasured_per_config; ++attempt) {
          const int worst = DisturbedRepetition(config_runs, cfg.max_baseline_drift);
          if (worst < 0) break;
          const double before = config_runs[worst].tpot_baseline_p50_ms;
          ASSIGN_OR_RETURN(config_runs[worst], measure(d, p, worst, attempt + 1, paths[worst]));
          ++remeasured;
          Progress("interference",
                   absl::StrCat("chunk=", chunk, " D=", d, " P=", p, " rep=", worst,
                                " measured again (baseline TPOT ", Fixed(before),
                                " ms off the configuration's median by more than ",
                                Fixed(100 * cfg.max_baseline_drift, 0),
                                "%, or a chunk count other than expected): now ",
                                Fixed(config_runs[worst].tpot_baseline_p50_ms), " ms, ",
                                config_runs[worst].chunks_actual, " chunks"));
        }
        runs.insert(runs.end(), config_runs.begin(), config_runs.end());
      }
    }
  }
  if (resumed > 0) Progress("interference", absl::StrCat(resumed, " runs resumed from ", results));

  const std::vector<InterferenceConfigResult> configs = Aggregate(runs);
  {
    std::ofstream csv(cfg.out_dir + "/interference_table.csv", std::ios::trunc);
    csv << InterferenceCsv(configs);
  }
  ASSIGN_OR_RETURN(StepFit fit, FitStepModel(configs));
  nlohmann::json calibration = {{"source", "pdserve-bench interference"},
                                {"backend", cfg.backend},
                                {"model", dir},
                                {"machine", MachineInfo()},
                                {"chunks", cfg.chunk_sizes},
                                {"decode_counts", cfg.decode_counts},
                                {"prefill_tokens", cfg.prefill_tokens},
                                {"repetitions", cfg.repetitions}};
  const nlohmann::json cost_model = CostModelJson(fit, calibration);
  RETURN_IF_ERROR(WriteJson(cfg.out_dir + "/cost_model.json", cost_model));
  // The router must accept what we wrote.
  if (auto parsed = router::ParseCostModel(cost_model.dump()); !parsed.ok()) {
    return absl::InternalError(
        absl::StrCat("the written cost_model.json does not load: ", parsed.status().message()));
  }
  router::CostModel model_for_plot(*router::ParseCostModel(cost_model.dump()));
  const double kv_layer_bytes_2048 = 2048.0 * 2 * model.num_kv_heads * model.head_dim * 4;
  const double transfer_cost = cfg.transfer_cost_ms > 0
                                   ? cfg.transfer_cost_ms
                                   : model_for_plot.TransferTailMs(kv_layer_bytes_2048) +
                                         model_for_plot.offload_overhead_ms();
  if (absl::Status s = WritePlots(configs, transfer_cost, cfg.out_dir); !s.ok()) {
    Progress("interference", absl::StrCat("plots skipped: ", s.message()));
  }

  double max_cv = 0;
  bool break_even = false;
  Table table({"chunk", "D", "P", "TPOT base", "TPOT during", "ratio", "chunks (exp)", "prefill ms",
               "total interf. ms", "predicted", "CV"});
  for (const InterferenceConfigResult& c : configs) {
    if (c.repetitions > 1) max_cv = std::max(max_cv, c.cv);
    break_even |= c.total_interference_ms > transfer_cost;
    table.AddRow(
        {absl::StrCat(c.chunk), absl::StrCat(c.decode), absl::StrCat(c.prefill_tokens),
         c.decode > 0 ? Fixed(c.tpot_baseline_ms) : "-",
         c.decode > 0 ? Fixed(c.tpot_during_ms) : "-", c.decode > 0 ? Fixed(c.penalty_ratio) : "-",
         absl::StrCat(Fixed(c.chunks_actual, 1), " (", c.chunks_expected, ")"),
         Fixed(c.prefill_duration_ms, 1), c.decode > 0 ? Fixed(c.total_interference_ms, 1) : "-",
         c.decode > 0 ? Fixed(fit.TotalInterference(c.decode, c.prefill_tokens), 1) : "-",
         Fixed(c.cv, 3)});
  }
  nlohmann::json summary;
  summary["machine"] = MachineInfo();
  summary["backend"] = cfg.backend;
  summary["model"] = dir;
  summary["runs"] = runs.size();
  summary["configs"] = configs.size();
  summary["r2_heldout"] = fit.r2_heldout;
  summary["r2_train"] = fit.r2_train;
  summary["heldout_configs"] = fit.heldout_configs;
  summary["max_cv"] = max_cv;
  summary["remeasured_runs"] = remeasured;
  summary["max_baseline_drift"] = cfg.max_baseline_drift;
  summary["transfer_cost_ms"] = transfer_cost;
  summary["break_even_exists"] = break_even;
  summary["fit"] = cost_model["step"];
  summary["targets"] = {{"r2_heldout_min", 0.9},
                        {"max_cv_max", 0.15},
                        {"r2_met", fit.r2_heldout >= 0.9},
                        {"cv_met", max_cv < 0.15}};
  RETURN_IF_ERROR(WriteSummary(cfg.out_dir, summary));
  std::printf(
      "pdserve-bench interference (%s; times in ms, means over repetitions of per-run medians)\n%s",
      dir.c_str(), table.ToString().c_str());
  std::printf(
      "fit: step = %.3f + %.4f*D + %.5f*P + %.3g*A_decode + %.3g*A_prefill ms; R^2 total "
      "interference: train %.3f, held-out %.3f (%d configs)\n",
      fit.intercept_ms, fit.per_decode_ms, fit.per_prefill_token_ms, fit.per_attention_ms,
      fit.per_prefill_attention_ms, fit.r2_train, fit.r2_heldout, fit.heldout_configs);
  std::printf("targets: R^2 held-out >= 0.9: %s; CV < 15%% per configuration: %s (max %.1f%%)\n",
              fit.r2_heldout >= 0.9 ? "met" : "NOT met", max_cv < 0.15 ? "met" : "NOT met",
              100 * max_cv);
  std::printf(
      "wrote %s/{interference_table.csv, cost_model.json, heatmap.png, breakeven.png, "
      "summary.json}\n",
      cfg.out_dir.c_str());
  return absl::OkStatus();
}

}  // namespace pdserve::bench
