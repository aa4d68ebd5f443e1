#include "bench/serve/serve_bench.h"

#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/serve/load_runner.h"
#include "common/model_config.h"
#include "common/perf_profile.h"
#include "common/status_macros.h"
#include "text/tokenizer.h"
#include "tools/client/generation_client.h"
#include "tools/client/openai_stream.h"
#include "tools/make_model/model_maker.h"
#include "tools/measure/bench_model.h"
#include "tools/measure/cpu_pinning.h"
#include "tools/measure/report.h"
#include "tools/measure/subprocess.h"
#include "tools/measure/workload.h"
#include "tools/pdctl/cluster_launcher.h"

namespace pdserve::bench {

using measure::BenchModel;
using measure::LoadBenchModel;
using measure::MachineInfo;
using measure::MakeTraceWorkload;
using measure::MakeWorkload;
using measure::Mean;
using measure::Median;
using measure::Mix;
using measure::MixSpec;
using measure::Percentile;
using measure::Progress;
using measure::ReadJson;
using measure::ReadTrace;
using measure::RunCommand;
using measure::SelectFromTrace;
using measure::Trace;
using measure::TraceSelection;
using measure::WorkloadRequest;
using measure::WriteJson;
using measure::WriteSummary;
namespace {

// The workers' flags for the emulated backend: the profile, and its cluster's batch limits.
struct EmulatedFlags {
  std::vector<std::string> decode;
  std::vector<std::string> prefill;
};

absl::StatusOr<EmulatedFlags> EmulatedWorkerFlags(const std::string& profile_path) {
  ASSIGN_OR_RETURN(const PerfProfile profile, LoadPerfProfile(profile_path));
  EmulatedFlags f;
  f.decode = {"--profile=" + profile_path};
  f.prefill = f.decode;
  if (profile.has_shape) {
    const WorkerShape& s = profile.shape;
    f.decode.push_back(absl::StrCat("--max_num_batched_tokens=", s.max_num_batched_tokens));
    f.decode.push_back(absl::StrCat("--max_num_seqs=", s.max_num_seqs));
    f.prefill.push_back(absl::StrCat("--max_batch_tokens=", s.prefill_max_batch_tokens));
  }
  return f;
}

// A copy of the profile at `path` with every time multiplied by `scale` (and the link's
// bandwidth divided by it), written to `out`: the same hardware `scale` times slower.
absl::Status WriteScaledProfile(const std::string& path, double scale, const std::string& out) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--profile: cannot read ", path));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  for (const char* section : {"step", "prefill", "transfer"}) {
    if (!j.contains(section)) continue;
    for (auto it = j[section].begin(); it != j[section].end(); ++it) {
      if (!it->is_number()) continue;
      const bool bandwidth = it.key() == "bytes_per_ms";
      *it = it->get<double>() * (bandwidth ? 1 / scale : scale);
    }
  }
  if (j.contains("offload_overhead_ms"))
    j["offload_overhead_ms"] = j["offload_overhead_ms"].get<double>() * scale;
  j["description"] = absl::StrCat(path, " with every time x", scale,
                                  " (pdserve-bench serve "
                                  "--time_scale): ",
                                  j.value("description", ""));
  RETURN_IF_ERROR(ParsePerfProfile(j.dump()).status());
  std::ofstream o(out);
  o << j.dump(2) << "\n";
  if (!o) return absl::InternalError(absl::StrCat("cannot write ", out));
  return absl::OkStatus();
}

// `launch` numbers the clusters of a policy: each keeps its own logs.
pdctl::ClusterConfig ClusterFor(const ServeBenchConfig& cfg, const std::string& dir,
                                const std::string& policy,
                                const std::vector<std::string>& router_flags, int launch,
                                const EmulatedFlags& emulated) {
  pdctl::ClusterConfig c;
  c.run_dir = absl::StrCat(cfg.out_dir, "/cluster/", policy, "-", launch);
  c.model_dir = dir;
  c.router_listen = "127.0.0.1:0";
  c.router_metrics_listen = "127.0.0.1:0";
  c.policy = policy;
  c.router.name = "router";
  c.router.flags = {absl::StrCat("--length_threshold=", cfg.length_threshold),
                    "--log_level=warning"};
  c.router.flags.insert(c.router.flags.end(), router_flags.begin(), router_flags.end());
  if (cfg.api == "openai") c.router_http_listen = "127.0.0.1:0";
  if (!emulated.decode.empty()) c.cost_model = cfg.profile;  // The workers' own timing.
  auto worker = [&](const std::string& name, int cpu_index, bool prefill) {
    pdctl::ProcessSpec p;
    p.name = name;
    p.threads = 1;
    if (!cfg.cpus.empty()) p.cpus = {cfg.cpus[cpu_index % cfg.cpus.size()]};
    p.flags = {"--log_level=warning", "--backend=" + cfg.backend};
    const auto& extra = prefill ? emulated.prefill : emulated.decode;
    p.flags.insert(p.flags.end(), extra.begin(), extra.end());
    return p;
  };
  c.router.cpus = cfg.router_cpus;
  if (policy == "always_local") {
    for (int i = 0; i < cfg.local_decode_workers; ++i)
      c.decode.push_back(worker(absl::StrCat("decode-", i), i, false));
  } else {
    for (int i = 0; i < cfg.decode_workers; ++i)
      c.decode.push_back(worker(absl::StrCat("decode-", i), 2 * i, false));
    for (int i = 0; i < cfg.prefill_workers; ++i) {
      c.prefill.push_back(worker(absl::StrCat("prefill-", i), 2 * i + 1, true));
      // The router and the load generator float over both cores; niced, the prefill worker's
      // forwards yield to them instead of their wake-ups landing on the decode worker's core.
      c.prefill.back().nice = cfg.prefill_nice;
    }
  }
  return c;
}

// The cold prefill of the TPOT probe: 2048 tokens, or half the context if that is shorter.
int ProbePrefillTokens(int max_context) { return std::min(2048, max_context / 2); }

// The worst running stream's TPOT p90 while a cold prefill (ProbePrefillTokens) runs, over its
// p90 just before.
absl::StatusOr<double> TpotInflationProbe(const std::shared_ptr<grpc::Channel>& channel, int vocab,
                                          int max_context, int repetition) {
  struct Stream {
    client::CallHandle handle;
    absl::Mutex mu;
    std::vector<absl::Time> times ABSL_GUARDED_BY(mu);
    std::thread thread;
  };
  constexpr int kStreams = 2;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < kStreams; ++i) {
    auto s = std::make_unique<Stream>();
    Stream* raw = s.get();
    std::vector<int32_t> prompt(64);
    for (int k = 0; k < 64; ++k) prompt[k] = (k * 131 + i * 17) % vocab;
    const int max_tokens = std::min(4000, max_context - 64 - 2);
    raw->thread = std::thread([raw, channel, prompt, max_tokens] {
      // Long enough to outlast the probe on a fast model; cancelled at its end.
      v1::GenerateRequest r = client::MakeRequest(prompt, max_tokens);
      r.mutable_sampling()->set_ignore_eos(true);
      client::CallGenerate(
          channel, r, absl::Minutes(5),
          [raw](const v1::GenerateResponse& m) {
            absl::MutexLock lock(&raw->mu);
            for (int t = 0; t < m.token_ids_size(); ++t) raw->times.push_back(absl::Now());
          },
          &raw->handle);
    });
    streams.push_back(std::move(s));
  }
  auto stop = [&] {
    for (auto& s : streams) {
      s->handle.Cancel();
      s->thread.join();
    }
  };
  // Steady: every stream 32 tokens in, then one more second of baseline.
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  while (true) {
    bool ready = true;
    for (auto& s : streams) {
      absl::MutexLock lock(&s->mu);
      ready &= s->times.size() >= 32;
    }
    if (ready) break;
    if (absl::Now() > deadline) {
      stop();
      return absl::DeadlineExceededError("probe streams never started");
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  absl::SleepFor(absl::Seconds(1));
  std::vector<int32_t> cold(ProbePrefillTokens(max_context));
  // Unique content per repetition: a repeated prompt would hit the prefix cache.
  for (int k = 0; k < static_cast<int>(cold.size()); ++k)
    cold[k] = static_cast<int32_t>((k * 7919 + 13 + repetition * 104729) % vocab);
  const absl::Time inject = absl::Now();
  const RequestResult injected = Send(LoadTarget{channel}, cold, 4, "probe", {});
  const absl::Time end = inject + absl::Milliseconds(injected.ttft_ms);
  stop();
  if (!injected.ok) return absl::InternalError(absl::StrCat("probe prefill: ", injected.error));
  double worst = 0;
  for (auto& s : streams) {
    absl::MutexLock lock(&s->mu);
    std::vector<double> before, during;
    for (size_t i = 1; i < s->times.size(); ++i) {
      const double gap = absl::ToDoubleMilliseconds(s->times[i] - s->times[i - 1]);
      if (s->times[i] > inject && s->times[i] <= end) during.push_back(gap);
      if (s->times[i] <= inject && s->times[i] > inject - absl::Seconds(1)) before.push_back(gap);
    }
    // A stream that emitted nothing during the prefill waited all of it for its next token.
    if (during.empty()) {
      for (size_t i = 1; i < s->times.size(); ++i) {
        if (s->times[i] > inject) {
          during.push_back(absl::ToDoubleMilliseconds(s->times[i] - s->times[i - 1]));
          break;
        }
      }
    }
    if (before.empty() || during.empty()) continue;
    worst = std::max(worst, Percentile(during, 90) / Percentile(before, 90));
  }
  return worst;
}

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

absl::Status Plot(
    const ServeBenchConfig& cfg,
    const std::map<std::string, std::map<std::string, std::vector<nlohmann::json>>>& points) {
  std::string script =
      "set terminal pngcairo size 1100,450 noenhanced\nset key bottom left\nset grid\n";
  for (const auto& [mix, by_policy] : points) {
    std::ofstream data(absl::StrCat(cfg.out_dir, "/", mix, ".dat"));
    std::vector<std::string> plots_att, plots_ttft;
    int index = 0;
    for (const auto& [policy, pts] : by_policy) {
      data << "\"" << policy << "\"\n";
      for (const auto& p : pts) {
        data << p["rate"].get<double>() << " " << p["attainment"].get<double>() << " "
             << p["ttft_ms"]["p90"].get<double>() << " " << p["tpot_ms"]["p90"].get<double>()
             << "\n";
      }
      data << "\n\n";
      plots_att.push_back(absl::StrCat("'", cfg.out_dir, "/", mix, ".dat' index ", index,
                                       " using 1:2 with linespoints title columnheader(1)"));
      plots_ttft.push_back(absl::StrCat("'", cfg.out_dir, "/", mix, ".dat' index ", index,
                                        " using 1:3 with linespoints title columnheader(1)"));
      ++index;
    }
    absl::StrAppend(
        &script, "set output '", cfg.out_dir, "/", mix, ".png'\nset multiplot layout 1,2 title '",
        mix, " mix'\n",
        "set xlabel 'request rate (1/s)'\nset ylabel 'SLO attainment'\nset yrange [0:1.05]\n",
        "plot ", absl::StrJoin(plots_att, ", "), ", 0.9 with lines dashtype 2 title '90 %'\n",
        "set ylabel 'TTFT p90 (ms)'\nset autoscale y\nset logscale y\nplot ",
        absl::StrJoin(plots_ttft, ", "), "\nunset logscale y\nunset multiplot\n");
  }
  {
    std::ofstream out(cfg.out_dir + "/plots.gnuplot");
    out << script;
  }
  auto run = RunCommand({"gnuplot", cfg.out_dir + "/plots.gnuplot"}, {}, absl::Seconds(60));
  return run.ok() ? absl::OkStatus() : run.status();
}

}  // namespace

ServeBenchConfig ServeBenchConfig::Quick() { return ServeBenchConfig(); }

ServeBenchConfig ServeBenchConfig::Full() {
  ServeBenchConfig c;
  c.requests_per_rate = 150;
  c.rate_multipliers = {0.25, 0.5, 1, 1.5, 2, 3, 4, 6, 8, 12};
  c.bisect_steps = 4;
  return c;
}

absl::Status RunServeBench(const ServeBenchConfig& cfg) {
  if (cfg.out_dir.empty()) return absl::InvalidArgumentError("--out: required");
  if (cfg.policies.empty() || cfg.mixes.empty())
    return absl::InvalidArgumentError("--policies, --mixes: empty");
  if (cfg.requests_per_rate < 4) return absl::InvalidArgumentError("--requests: must be >= 4");
  if (cfg.local_decode_workers < 1 || cfg.local_decode_workers > 64)
    return absl::InvalidArgumentError("--local_decode_workers: must be in [1, 64]");
  // This thread, and every thread it starts from here on (the load generator's clients,
  // gRPC's), runs beside the router. Workers are pinned on their own (cpus).
  RETURN_IF_ERROR(measure::PinThisThread("router_cpus", cfg.router_cpus));
  ASSIGN_OR_RETURN(const BenchModel loaded, LoadBenchModel(cfg.model_dir, "tiny", "serve"));
  const std::string& dir = loaded.dir;
  const ModelConfig& model = loaded.config;
  std::unique_ptr<text::Tokenizer> tokenizer;
  if (cfg.api == "openai") {
    ASSIGN_OR_RETURN(tokenizer, text::Tokenizer::FromFile(dir + "/tokenizer.json"));
  }
  if (cfg.max_context < 0 || cfg.max_context > model.max_position_embeddings ||
      (cfg.max_context > 0 && cfg.max_context < 512)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_context: ", cfg.max_context, " is outside [512, ",
                     model.max_position_embeddings, "] (the model's context), or 0"));
  }
  const int max_context = cfg.max_context > 0 ? cfg.max_context : model.max_position_embeddings;
  std::optional<Trace> trace;
  std::vector<std::string> mixes = cfg.mixes;
  if (!cfg.trace_path.empty()) {
    ASSIGN_OR_RETURN(const Trace read, ReadTrace(cfg.trace_path));
    TraceSelection selection = cfg.trace;
    if (selection.max_context == 0) selection.max_context = max_context;
    ASSIGN_OR_RETURN(trace, SelectFromTrace(read, selection));
    Progress("serve", absl::StrCat("trace ", cfg.trace_path, ": ", trace->requests.size(),
                                   " requests selected (", read.requests.size(), " in the file, ",
                                   Fixed(read.rate(), 2), " req/s)"));
    mixes = {"trace"};
  }
  if (cfg.repeats < 1) return absl::InvalidArgumentError("--repeats: must be >= 1");
  if (cfg.prefill_workers < 1 || cfg.prefill_workers > 64 || cfg.decode_workers < 1 ||
      cfg.decode_workers > 64) {
    return absl::InvalidArgumentError("--prefill_workers, --decode_workers: must be in [1, 64]");
  }
  if ((cfg.slo_ttft_ms > 0) != (cfg.slo_tpot_ms > 0) || cfg.slo_ttft_ms < 0 ||
      cfg.slo_tpot_ms < 0) {
    return absl::InvalidArgumentError("--slo_ttft_ms, --slo_tpot_ms: give both (> 0) or neither");
  }
  for (double r : cfg.rates_per_s) {
    if (!(r > 0)) return absl::InvalidArgumentError("--rates_per_s: every rate must be > 0");
  }
  if ((cfg.backend == "emulated") != !cfg.profile.empty()) {
    return absl::InvalidArgumentError("--profile: required with --backend=emulated, and only then");
  }
  if (!(cfg.time_scale > 0) || (cfg.time_scale != 1 && cfg.profile.empty())) {
    return absl::InvalidArgumentError("--time_scale: must be > 0, and needs --profile");
  }
  std::filesystem::create_directories(cfg.out_dir + "/runs");
  EmulatedFlags emulated;
  ServeBenchConfig effective = cfg;
  if (!cfg.profile.empty()) {
    if (cfg.time_scale != 1) {
      effective.profile = cfg.out_dir + "/profile.json";
      RETURN_IF_ERROR(WriteScaledProfile(cfg.profile, cfg.time_scale, effective.profile));
    }
    ASSIGN_OR_RETURN(emulated, EmulatedWorkerFlags(effective.profile));
  }
  const absl::Time wall_start = absl::Now();
  const double cpu_start = CpuSeconds();

  std::map<std::string, Slos> slos;        // By mix.
  std::map<std::string, double> mean_e2e;  // By mix.
  std::map<std::string, std::map<std::string, std::vector<nlohmann::json>>>
      points;  // mix -> policy -> points.
  std::map<std::string, double> inflation;
  for (const std::string& policy : cfg.policies) {
    std::unique_ptr<pdctl::LaunchedCluster> cluster;
    std::shared_ptr<grpc::Channel> channel;
    LoadTarget target;
    std::vector<std::string> cluster_flags;
    int launches = 0;
    // The router is told the mix's objectives (as an operator would configure it); a cluster
    // with other flags is replaced.
    auto ensure_cluster = [&](const std::vector<std::string>& flags) -> absl::Status {
      if (cluster && flags == cluster_flags) return absl::OkStatus();
      cluster.reset();
      Progress("serve", absl::StrCat("starting the ", policy, " cluster", flags.empty() ? "" : " (",
                                     absl::StrJoin(flags, " "), flags.empty() ? "" : ")"));
      ASSIGN_OR_RETURN(pdctl::LaunchedCluster launched,
                       pdctl::LaunchCluster(
                           ClusterFor(effective, dir, policy, flags, launches++, emulated), false));
      cluster = std::make_unique<pdctl::LaunchedCluster>(std::move(launched));
      channel = client::MakeChannel(cluster->state.router, GrpcSecurity());
      target = LoadTarget{channel, cfg.api == "openai" ? cluster->state.router_http : "",
                          tokenizer.get()};
      cluster_flags = flags;
      return absl::OkStatus();
    };
    for (const std::string& mix_name : mixes) {
      MixSpec mix;
      if (!trace) {
        ASSIGN_OR_RETURN(mix, Mix(mix_name, max_context));
      }
      auto make_work = [&](double rate, int count,
                           uint64_t seed) -> absl::StatusOr<std::vector<WorkloadRequest>> {
        if (trace) return MakeTraceWorkload(*trace, rate, count, seed, model.vocab_size);
        return MakeWorkload(mix, rate, count, seed, model.vocab_size);
      };
      const std::string mix_dir = absl::StrCat(cfg.out_dir, "/runs/", mix_name);
      std::filesystem::create_directories(mix_dir + "/" + policy);
      // Unloaded latency of each request kind in the mix (measured once, one request at a
      // time, on the first policy's cluster): a request's SLO is a multiple of its kind's.
      if (!slos.contains(mix_name)) {
        auto saved = ReadJson(mix_dir + "/unloaded.json");
        if (!saved.ok()) {
          RETURN_IF_ERROR(ensure_cluster({}));
          ASSIGN_OR_RETURN(const auto work, make_work(1.0, 16, cfg.seed ^ 0x5105));
          const auto results = RunLoad(target, work, /*sequential=*/true);
          std::map<std::string, std::vector<double>> ttft, tpot, e2e;
          for (size_t i = 1; i < results.size(); ++i) {  // The first warms up.
            if (!results[i].ok)
              return absl::InternalError(absl::StrCat("unloaded request: ", results[i].error));
            ttft[results[i].kind].push_back(results[i].ttft_ms);
            tpot[results[i].kind].push_back(results[i].tpot_ms);
            e2e[results[i].kind].push_back(results[i].e2e_ms);
          }
          nlohmann::json j = {{"measured_with", policy}};
          for (const auto& [kind, values] : ttft) {
            j["kinds"][kind] = {{"ttft_ms", Median(values)},
                                {"tpot_ms", Median(tpot[kind])},
                                {"e2e_ms", Median(e2e[kind])},
                                {"samples", values.size()}};
          }
          // Every request's mean unloaded e2e sets the rate scale.
          std::vector<double> all;
          for (const auto& [kind, values] : e2e)
            all.insert(all.end(), values.begin(), values.end());
          j["mean_e2e_ms"] = Mean(all);
          RETURN_IF_ERROR(WriteJson(mix_dir + "/unloaded.json", j));
          saved = j;
        }
        Slos kinds;
        const bool absolute = cfg.slo_ttft_ms > 0;
        for (auto it = (*saved)["kinds"].begin(); it != (*saved)["kinds"].end(); ++it) {
          Slo slo;
          slo.ttft_ms = absolute ? cfg.slo_ttft_ms * cfg.time_scale
                                 : cfg.ttft_slo_multiple * (*it)["ttft_ms"].get<double>();
          slo.tpot_ms = absolute ? cfg.slo_tpot_ms * cfg.time_scale
                                 : cfg.tpot_slo_multiple * (*it)["tpot_ms"].get<double>();
          slo.e2e_ms = (*it)["e2e_ms"].get<double>();
          kinds[it.key()] = slo;
          Progress("serve",
                   absl::StrCat(mix_name, "/", it.key(), ": SLO TTFT <= ", Fixed(slo.ttft_ms, 1),
                                " ms, TPOT <= ", Fixed(slo.tpot_ms, 2), " ms",
                                absolute ? " (given)"
                                         : absl::StrCat(" (", cfg.ttft_slo_multiple, "x / ",
                                                        cfg.tpot_slo_multiple, "x unloaded)")));
        }
        // A kind the unloaded sample missed (rare follow-ups) gets the chat objectives.
        for (const char* kind : {"chat", "document", "follow_up"}) {
          if (!kinds.contains(kind))
            kinds[kind] = kinds.contains("chat") ? kinds["chat"] : kinds.begin()->second;
        }
        slos[mix_name] = kinds;
        mean_e2e[mix_name] = (*saved)["mean_e2e_ms"].get<double>();
      }
      const Slos& slo = slos[mix_name];
      const double base_rate = 1000.0 / std::max(1.0, mean_e2e[mix_name]);
      double slo_ttft = 0;
      double slo_tpot = 1e18;
      for (const auto& [kind, k] : slo) {
        slo_ttft = std::max(slo_ttft, k.ttft_ms);
        slo_tpot = std::min(slo_tpot, k.tpot_ms);
      }
      // Every request carries its kind's objectives; the router's defaults only cover the
      // streams it cannot attribute (e.g. arrivals expected during a prefill): the tightest TPOT.
      const std::vector<std::string> slo_flags = {
          absl::StrCat("--slo_ttft=", Fixed(slo_ttft, 3), "ms"),
          absl::StrCat("--slo_tpot=", Fixed(slo_tpot, 3), "ms"),
          absl::StrCat("--max_prefill_queue=", Fixed(slo_ttft, 3), "ms")};
      // One rate point: resumed from `path` when it exists, else measured there.
      auto measure_point = [&](double rate, const std::string& path,
                               uint64_t seed) -> absl::StatusOr<nlohmann::json> {
        auto saved = ReadJson(path);
        nlohmann::json point;
        if (saved.ok()) {
          point = *saved;
        } else {
          RETURN_IF_ERROR(ensure_cluster(slo_flags));
          // Repeats: the median run by attainment stands for the point; every run's
          // attainment is kept (in run order) for goodput's spread.
          std::vector<nlohmann::json> runs;
          for (int r = 0; r < cfg.repeats; ++r) {
            ASSIGN_OR_RETURN(const auto work,
                             make_work(rate, cfg.requests_per_rate, seed + 7919 * r));
            runs.push_back(RatePoint(RunLoad(target, work, false, &slo), slo, rate));
            if (r + 1 < cfg.repeats) absl::SleepFor(absl::Milliseconds(500));
          }
          std::vector<double> attainments;
          for (const auto& run : runs) attainments.push_back(run["attainment"].get<double>());
          std::vector<size_t> order(runs.size());
          std::iota(order.begin(), order.end(), 0);
          std::sort(order.begin(), order.end(),
                    [&](size_t a, size_t b) { return attainments[a] < attainments[b]; });
          point = runs[order[order.size() / 2]];
          point["attainment_runs"] = attainments;
          // Its requests can be generated again from this (pdserve-sim validate does).
          point["seed"] = seed + 7919 * order[order.size() / 2];
          // A process of the cluster that died under load is a finding, not noise: record
          // how it ended and where its log is, and start a fresh cluster for what follows.
          nlohmann::json exited = nlohmann::json::object();
          for (const auto& child : cluster->children) {
            if (child->running()) continue;
            const int status = child->WaitExit(absl::ZeroDuration()).value_or(-1);
            exited[child->log_path()] = WIFSIGNALED(status)
                                            ? absl::StrCat("signal ", WTERMSIG(status))
                                            : absl::StrCat("exit ", WEXITSTATUS(status));
          }
          if (!exited.empty()) {
            point["exited"] = exited;
            Progress("serve", absl::StrCat(policy, " ", mix_name,
                                           ": cluster processes exited: ", exited.dump()));
            cluster.reset();
            cluster_flags.clear();
          }
          RETURN_IF_ERROR(WriteJson(path, point));
          absl::SleepFor(absl::Milliseconds(500));  // Let queues drain between rates.
        }
        Progress("serve",
                 absl::StrCat(policy, " ", mix_name, " ", Fixed(rate, 2), " req/s: attainment ",
                              Fixed(point["attainment"].get<double>(), 2), ", TTFT p90 ",
                              Fixed(point["ttft_ms"]["p90"].get<double>(), 1), " ms, TPOT p90 ",
                              Fixed(point["tpot_ms"]["p90"].get<double>(), 2), " ms, offloaded ",
                              point["offloaded"].get<int>(), "/", point["requests"].get<int>()));
        return point;
      };
      std::vector<nlohmann::json>& sweep = points[mix_name][policy];
      int failures = 0;
      std::vector<double> rates = cfg.rates_per_s;
      if (rates.empty()) {
        for (double m : cfg.rate_multipliers) rates.push_back(base_rate * m);
      }
      for (size_t k = 0; k < rates.size() && failures < cfg.stop_after_failures; ++k) {
        ASSIGN_OR_RETURN(
            nlohmann::json point,
            measure_point(rates[k], absl::StrCat(mix_dir, "/", policy, "/rate_", k, ".json"),
                          cfg.seed + k));
        failures = point["attainment"].get<double>() < 0.5 ? failures + 1 : 0;
        sweep.push_back(point);
      }
      // The grid's rates are far apart around the knee (one request more or less meeting its
      // objectives moved the interpolated goodput by up to 2x): bisect between the highest
      // passing rate and the lowest failing rate above it. A policy that passes no rate of
      // the grid is not chased towards zero (its low rates take minutes each).
      for (int b = 0; b < cfg.bisect_steps; ++b) {
        double lo = -1, hi = -1;
        for (const auto& p : sweep) {
          if (p["attainment"].get<double>() >= 0.9) lo = std::max(lo, p["rate"].get<double>());
        }
        for (const auto& p : sweep) {
          const double r = p["rate"].get<double>();
          if (r > lo && p["attainment"].get<double>() < 0.9 && (hi < 0 || r < hi)) hi = r;
        }
        if (lo < 0 || hi < 0) break;  // No rate passed, or every rate did.
        ASSIGN_OR_RETURN(
            nlohmann::json point,
            measure_point((lo + hi) / 2, absl::StrCat(mix_dir, "/", policy, "/bisect_", b, ".json"),
                          cfg.seed + 1000 + b));
        sweep.push_back(point);
      }
      std::sort(sweep.begin(), sweep.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
        return a["rate"].get<double>() < b["rate"].get<double>();
      });
    }
    const std::string probe_path = absl::StrCat(cfg.out_dir, "/runs/probe_", policy, ".json");
    auto saved = ReadJson(probe_path);
    if (cfg.probe_repetitions == 0) {
      continue;  // No probe asked for.
    } else if (saved.ok()) {
      inflation[policy] = (*saved)["tpot_p90_inflation"].get<double>();
    } else {
      RETURN_IF_ERROR(ensure_cluster(cluster_flags));  // The last mix's objectives.
      // One injection is one draw of the machine's scheduling noise (a sub-millisecond TPOT on
      // the tiny model): the median of several is the figure.
      std::vector<double> ratios;
      for (int r = 0; r < cfg.probe_repetitions; ++r) {
        ASSIGN_OR_RETURN(double ratio,
                         TpotInflationProbe(channel, model.vocab_size, max_context, r));
        ratios.push_back(ratio);
        absl::SleepFor(absl::Milliseconds(300));
      }
      const double ratio = Median(ratios);
      RETURN_IF_ERROR(
          WriteJson(probe_path, {{"tpot_p90_inflation", ratio}, {"repetitions", ratios}}));
      inflation[policy] = ratio;
    }
    Progress("serve",
             absl::StrCat(policy, ": TPOT p90 inflation under a ", ProbePrefillTokens(max_context),
                          "-token cold prefill ", Fixed(inflation[policy], 2), "x"));
  }

  nlohmann::json summary;
  summary["machine"] = MachineInfo();
  summary["backend"] = cfg.backend;
  summary["model"] = dir;
  summary["cluster"] = {{"local_decode_workers", cfg.local_decode_workers},
                        {"prefill_workers", cfg.prefill_workers},
                        {"decode_workers", cfg.decode_workers},
                        {"cpus", cfg.cpus},
                        {"router_cpus", cfg.router_cpus}};
  // What pdserve-sim validate needs to simulate the same cluster and regenerate the requests.
  if (!effective.profile.empty()) {
    summary["profile"] = effective.profile;
    summary["time_scale"] = cfg.time_scale;
  }
  summary["seed"] = cfg.seed;
  summary["length_threshold"] = cfg.length_threshold;
  summary["max_context"] = max_context;
  if (trace) {
    summary["trace_selection"] = {{"path", cfg.trace_path},
                                  {"start_s", cfg.trace.start_s},
                                  {"duration_s", cfg.trace.duration_s},
                                  {"length_scale", cfg.trace.length_scale},
                                  {"max_context", max_context},
                                  {"spread_ties", cfg.trace.spread_ties}};
  }
  const double wall = absl::ToDoubleSeconds(absl::Now() - wall_start);
  summary["loadgen_cpu_share"] =
      (CpuSeconds() - cpu_start) / std::max(1e-9, wall * std::thread::hardware_concurrency());
  Table table(
      {"mix", "policy", "goodput (req/s)", "vs best fixed", "TPOT p90 inflation (cold prefill)"});
  for (const auto& [mix, by_policy] : points) {
    nlohmann::json m;
    for (const auto& [kind, slo] : slos[mix]) {
      m["slo_ttft_ms"][kind] = slo.ttft_ms;
      m["slo_tpot_ms"][kind] = slo.tpot_ms;
    }
    double best_fixed = 0;
    for (const auto& [policy, pts] : by_policy) {
      const double g = Goodput(pts);
      m["goodput"][policy] = g;
      m["points"][policy] = pts;
      const std::vector<double> runs = GoodputPerRun(pts);
      if (runs.size() > 1) {
        m["goodput_runs"][policy] = runs;
        m["goodput_spread"][policy] = {{"median", Median(runs)},
                                       {"min", *std::min_element(runs.begin(), runs.end())},
                                       {"max", *std::max_element(runs.begin(), runs.end())}};
      }
      if (policy != "cost_model") best_fixed = std::max(best_fixed, g);
    }
    const double cost_model = m["goodput"].value("cost_model", 0.0);
    m["goodput_cost_model_over_best_fixed"] = best_fixed > 0 ? cost_model / best_fixed : 0.0;
    m["tpot_p90_inflation_cost_model"] =
        inflation.contains("cost_model") ? inflation["cost_model"] : 0.0;
    m["tpot_p90_inflation_always_local"] =
        inflation.contains("always_local") ? inflation["always_local"] : 0.0;
    for (const auto& [policy, pts] : by_policy) {
      const double g = m["goodput"][policy].get<double>();
      std::string shown = Fixed(g, 2);
      if (m.contains("goodput_spread") && m["goodput_spread"].contains(policy)) {
        const auto& s = m["goodput_spread"][policy];
        shown = absl::StrCat(Fixed(g, 2), " [", Fixed(s["min"].get<double>(), 2), ", ",
                             Fixed(s["max"].get<double>(), 2), "]");
      }
      table.AddRow({mix, policy, shown, best_fixed > 0 ? Fixed(g / best_fixed, 2) + "x" : "-",
                    inflation.contains(policy) ? Fixed(inflation[policy], 2) + "x" : "-"});
    }
    summary[mix] = m;
  }
  RETURN_IF_ERROR(WriteSummary(cfg.out_dir, summary));
  if (absl::Status s = Plot(cfg, points); !s.ok())
    Progress("serve", absl::StrCat("plots skipped: ", s.message()));
  std::printf(
      "pdserve-bench serve (%s; SLOs %gx unloaded TTFT, %gx unloaded TPOT; goodput at >= 90%% "
      "attainment)\n%s",
      dir.c_str(), cfg.ttft_slo_multiple, cfg.tpot_slo_multiple, table.ToString().c_str());
  std::printf("load generator CPU share: %.1f%% of the machine\n",
              100 * summary["loadgen_cpu_share"].get<double>());
  return absl::OkStatus();
}

}  // namespace pdserve::bench
