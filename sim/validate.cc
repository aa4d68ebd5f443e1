#include "sim/validate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/model_config.h"
#include "common/status_macros.h"
#include "common/text_table.h"
#include "decode_worker/scheduler.h"
#include "kvcache/kv_pool.h"
#include "prefill_worker/prefill_batcher.h"
#include "sim/sim_summary.h"
#include "sim/sim_workload.h"
#include "tools/measure/bench_model.h"
#include "tools/measure/report.h"
#include "tools/measure/trace.h"
#include "tools/measure/workload.h"
#include "worker/worker_process.h"

namespace pdserve::sim {
namespace {

// The seed the serve bench gave a point: recorded in it, else from its file name (rate_K:
// seed + K; bisect_B: seed + 1000 + B; its first repeat).
std::optional<uint64_t> PointSeed(const nlohmann::json& point, const std::string& stem,
                                  uint64_t serve_seed) {
  if (point.contains("seed") && point["seed"].is_number_unsigned())
    return point["seed"].get<uint64_t>();
  int index = 0;
  if (stem.rfind("rate_", 0) == 0 && absl::SimpleAtoi(stem.substr(5), &index))
    return serve_seed + index;
  if (stem.rfind("bisect_", 0) == 0 && absl::SimpleAtoi(stem.substr(7), &index))
    return serve_seed + 1000 + index;
  return std::nullopt;
}

double Get(const nlohmann::json& point, const char* metric, const char* p) {
  if (!point.contains(metric) || !point[metric].contains(p)) return 0;
  return point[metric][p].get<double>();
}

double MedianRelativeError(const std::vector<ValidationRow>& rows,
                           MetricPair ValidationRow::*metric) {
  std::vector<double> errors;
  for (const ValidationRow& r : rows) {
    const MetricPair& m = r.*metric;
    if (r.below_knee && m.measured > 0) errors.push_back(std::abs(m.simulated / m.measured - 1));
  }
  return errors.empty() ? -1 : measure::Median(errors);
}

// The serve bench's request generator for one mix (or its trace): rate, count, seed.
using WorkloadFn = std::function<absl::StatusOr<std::vector<measure::WorkloadRequest>>(
    double rate, int count, uint64_t seed)>;

// The serve bench's unloaded pass: 16 requests of the mix (seed ^ 0x5105), one at a time,
// the first a warm-up; the median TTFT (or TPOT) of each kind.
absl::StatusOr<std::map<std::string, double>> SimulatedUnloaded(const SimConfig& base,
                                                                const WorkloadFn& make_work,
                                                                uint64_t serve_seed,
                                                                bool tpot = false) {
  // The serve bench sends them one at a time, each after the previous one ended: a minute
  // apart, so do they here (a trace's own arrivals may put several at the same instant).
  ASSIGN_OR_RETURN(std::vector<measure::WorkloadRequest> work,
                   make_work(0.05, 16, serve_seed ^ 0x5105));
  for (size_t i = 0; i < work.size(); ++i) work[i].arrival_s = 60.0 * static_cast<double>(i);
  std::vector<SimRequest> requests = WorkloadRequests(work, {});
  ASSIGN_OR_RETURN(const SimResult result, Simulate(base, requests));
  std::map<std::string, std::vector<double>> ttft;
  for (size_t i = 1; i < result.requests.size(); ++i) {
    const SimRequestResult& r = result.requests[i];
    if (r.ok && (!tpot || r.tpot_ms > 0)) ttft[r.kind].push_back(tpot ? r.tpot_ms : r.ttft_ms);
  }
  std::map<std::string, double> out;
  for (const auto& [kind, values] : ttft) out[kind] = measure::Median(values);
  return out;
}

// The host time per decode step that makes the simulated unloaded TPOTs match the measured
// ones: one request at a time, every step decodes one token, so the difference in TPOT is the
// time each step spends outside the profile's forward (never negative).
absl::StatusOr<double> CalibrateHost(SimConfig base, const WorkloadFn& make_work,
                                     const nlohmann::json& unloaded, uint64_t serve_seed) {
  base.host_ms_per_step = 0;
  ASSIGN_OR_RETURN(const auto simulated, SimulatedUnloaded(base, make_work, serve_seed, true));
  std::vector<double> estimates;
  for (const auto& [kind, tpot] : simulated) {
    if (!unloaded.contains("kinds") || !unloaded["kinds"].contains(kind)) continue;
    estimates.push_back(unloaded["kinds"][kind]["tpot_ms"].get<double>() - tpot);
  }
  if (estimates.empty())
    return absl::NotFoundError("unloaded.json: no request kind the simulation also has");
  return std::max(0.0, measure::Median(estimates));
}

// The RPC hop that makes the simulated unloaded TTFTs match the measured ones: TTFT is
// linear in the hop (a fixed number of hops per request), so two simulations give it.
absl::StatusOr<double> CalibrateRpc(SimConfig base, const WorkloadFn& make_work,
                                    const nlohmann::json& unloaded, uint64_t serve_seed) {
  base.rpc_ms = 0;
  ASSIGN_OR_RETURN(const auto at0, SimulatedUnloaded(base, make_work, serve_seed));
  base.rpc_ms = 1;
  ASSIGN_OR_RETURN(const auto at1, SimulatedUnloaded(base, make_work, serve_seed));
  std::vector<double> estimates;
  for (const auto& [kind, ttft0] : at0) {
    if (!unloaded.contains("kinds") || !unloaded["kinds"].contains(kind) || !at1.contains(kind))
      continue;
    const double hops = at1.at(kind) - ttft0;
    if (hops <= 0) continue;
    estimates.push_back((unloaded["kinds"][kind]["ttft_ms"].get<double>() - ttft0) / hops);
  }
  if (estimates.empty())
    return absl::NotFoundError("unloaded.json: no request kind the simulation also has");
  return std::max(0.0, measure::Median(estimates));
}

}  // namespace

absl::StatusOr<WorkerShape> DefaultWorkerShape(const std::string& model_dir) {
  if (model_dir.empty()) return absl::InvalidArgumentError("--model: empty");
  ASSIGN_OR_RETURN(const measure::BenchModel loaded,
                   measure::LoadBenchModel(model_dir, "", "validate"));
  const ModelConfig& model = loaded.config;
  WorkerShape s;
  // The workers' defaults: their flags default to these configs' own (worker/worker_flags.cc,
  // decode_worker/main.cc, prefill_worker/main.cc).
  const WorkerProcessConfig process;
  const decode::SchedulerConfig scheduler;
  s.kv_layout.num_layers = model.num_layers;
  s.kv_layout.num_kv_heads = model.num_kv_heads;
  s.kv_layout.head_dim = model.head_dim;
  s.kv_layout.block_size =
      process.block_size > 0 ? process.block_size : WorkerProcessConfig::kDefaultBlockSize;
  s.kv_layout.dtype = process.kv_dtype;
  s.kv_layout.num_blocks =
      kvcache::KvPool::BlocksForBytes(s.kv_layout, static_cast<size_t>(process.kv_cache_bytes));
  s.max_num_batched_tokens = scheduler.max_num_batched_tokens;
  s.max_num_seqs = scheduler.max_num_seqs;
  s.max_awaiting_kv = scheduler.max_awaiting_kv;
  s.max_context_tokens = model.max_position_embeddings;
  s.prefill_max_batch_tokens = prefill::PrefillBatcherConfig{}.max_batch_tokens;
  s.vocab_size = model.vocab_size;
  RETURN_IF_ERROR(s.Validate());
  return s;
}

absl::StatusOr<ValidationResult> Validate(const ValidateConfig& config) {
  ASSIGN_OR_RETURN(const nlohmann::json summary,
                   measure::ReadJson(config.serve_dir + "/summary.json"));
  std::string model_dir = config.model_dir;
  if (model_dir.empty()) {
    if (!summary.contains("model") || !summary["model"].is_string())
      return absl::InvalidArgumentError(
          "--serve_dir: its summary.json names no model; pass --model");
    model_dir = summary["model"].get<std::string>();
  }
  // An emulated run names the profile its workers took their time and shape from (a copy
  // scaled by --time_scale, in the serve directory): the very same file is simulated.
  SimProfile profile = config.profile;
  WorkerShape shape;
  if (summary.contains("profile") && summary["profile"].is_string()) {
    ASSIGN_OR_RETURN(profile, LoadSimProfile(summary["profile"].get<std::string>()));
    if (!profile.has_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(profile.path, ": an emulated run's profile needs its cluster object"));
    }
    ASSIGN_OR_RETURN(const WorkerShape defaults, DefaultWorkerShape(model_dir));
    shape = profile.shape;
    // The model directory's vocabulary and context (the emulated workers keep them).
    shape.vocab_size = defaults.vocab_size;
    shape.max_context_tokens = defaults.max_context_tokens;
  } else {
    ASSIGN_OR_RETURN(shape, DefaultWorkerShape(model_dir));
  }
  // always_local's decode workers, and the other policies' prefill and decode workers, as the
  // serve bench ran them (summaries before it said so: 2, 1, 1).
  int local_decode_workers = 2, prefill_workers = 1, decode_workers = 1;
  if (summary.contains("cluster") && summary["cluster"].is_object()) {
    local_decode_workers = summary["cluster"].value("local_decode_workers", 2);
    prefill_workers = summary["cluster"].value("prefill_workers", 1);
    decode_workers = summary["cluster"].value("decode_workers", 1);
  }
  if (local_decode_workers < 1 || prefill_workers < 1 || decode_workers < 1)
    return absl::InvalidArgumentError(
        "--serve_dir: cluster.local_decode_workers, prefill_workers and decode_workers must be "
        ">= 1");
  const uint64_t serve_seed = summary.value("seed", config.serve_seed);
  const int length_threshold = summary.value("length_threshold", config.length_threshold);
  // A trace replay's requests come from the trace, selected as the serve bench did.
  std::optional<measure::Trace> trace;
  if (summary.contains("trace_selection")) {
    const nlohmann::json& t = summary["trace_selection"];
    ASSIGN_OR_RETURN(const measure::Trace read, measure::ReadTrace(t["path"].get<std::string>()));
    measure::TraceSelection selection;
    selection.start_s = t.value("start_s", 0.0);
    selection.duration_s = t.value("duration_s", 0.0);
    selection.length_scale = t.value("length_scale", 1.0);
    selection.max_context = t.value("max_context", 0);
    selection.spread_ties = t.value("spread_ties", false);
    ASSIGN_OR_RETURN(trace, measure::SelectFromTrace(read, selection));
  }
  ValidationResult result;
  for (auto mix_it = summary.begin(); mix_it != summary.end(); ++mix_it) {
    const nlohmann::json& m = mix_it.value();
    if (!m.is_object() || !m.contains("slo_ttft_ms") || !m.contains("slo_tpot_ms")) continue;
    const std::string& mix_name = mix_it.key();
    WorkloadFn make_work;
    if (mix_name == "trace") {
      if (!trace) continue;  // A summary from before traces recorded their selection.
      make_work = [&trace, vocab = shape.vocab_size](double rate, int count, uint64_t seed) {
        return measure::MakeTraceWorkload(*trace, rate, count, seed, vocab);
      };
    } else {
      auto mix = measure::Mix(mix_name, summary.value("max_context", shape.max_context_tokens));
      if (!mix.ok()) continue;
      make_work = [mix = *mix, vocab = shape.vocab_size](
                      double rate, int count,
                      uint64_t seed) -> absl::StatusOr<std::vector<measure::WorkloadRequest>> {
        return measure::MakeWorkload(mix, rate, count, seed, vocab);
      };
    }
    // Every request is held to its kind's objectives; the router's defaults are the loosest
    // TTFT and the tightest TPOT, its prefill queue bound the TTFT (as the serve bench ran it).
    std::map<std::string, router::SloConfig> objectives;
    router::SloConfig router_slo{.ttft_ms = 0, .tpot_ms = HUGE_VAL};
    for (auto k = m["slo_ttft_ms"].begin(); k != m["slo_ttft_ms"].end(); ++k) {
      if (!m["slo_tpot_ms"].contains(k.key())) continue;
      const router::SloConfig slo{.ttft_ms = k->get<double>(),
                                  .tpot_ms = m["slo_tpot_ms"][k.key()].get<double>()};
      objectives[k.key()] = slo;
      router_slo.ttft_ms = std::max(router_slo.ttft_ms, slo.ttft_ms);
      router_slo.tpot_ms = std::min(router_slo.tpot_ms, slo.tpot_ms);
    }
    if (objectives.empty()) continue;
    const std::string mix_dir = absl::StrCat(config.serve_dir, "/runs/", mix_name);
    double rpc_ms = config.rpc_ms;
    double host_ms = config.host_ms;
    if (rpc_ms < 0 || host_ms < 0) {
      ASSIGN_OR_RETURN(const nlohmann::json unloaded,
                       measure::ReadJson(mix_dir + "/unloaded.json"));
      SimConfig base;
      base.profile = profile;
      base.profile.shape = shape;
      // Measured on the first policy's cluster, one request at a time.
      const std::string first = unloaded.value("measured_with", std::string("always_local"));
      base.decode_workers = first == "always_local" ? local_decode_workers : decode_workers;
      base.prefill_workers = first == "always_local" ? 0 : prefill_workers;
      base.policy.name = first;
      base.policy.length_threshold = length_threshold;
      base.report_interval_ms = config.report_interval_ms;
      // The host time first: TPOT does not depend on the RPC hop (a constant shift per token).
      base.rpc_ms = std::max(0.0, rpc_ms);
      if (host_ms < 0) {
        ASSIGN_OR_RETURN(host_ms, CalibrateHost(base, make_work, unloaded, serve_seed));
      }
      base.host_ms_per_step = host_ms;
      if (rpc_ms < 0) {
        ASSIGN_OR_RETURN(rpc_ms, CalibrateRpc(base, make_work, unloaded, serve_seed));
      }
    }
    result.rpc_ms[mix_name] = rpc_ms;
    result.host_ms[mix_name] = host_ms;
    std::error_code ec;
    for (const auto& policy_dir : std::filesystem::directory_iterator(mix_dir, ec)) {
      if (!policy_dir.is_directory()) continue;
      const std::string policy = policy_dir.path().filename().string();
      std::vector<ValidationRow> sweep;
      std::vector<std::filesystem::path> files;
      for (const auto& f : std::filesystem::directory_iterator(policy_dir.path()))
        if (f.path().extension() == ".json") files.push_back(f.path());
      std::sort(files.begin(), files.end());
      for (const auto& file : files) {
        ASSIGN_OR_RETURN(const nlohmann::json point, measure::ReadJson(file.string()));
        const std::optional<uint64_t> seed = PointSeed(point, file.stem().string(), serve_seed);
        if (!seed || !point.contains("rate") || !point.contains("requests")) continue;
        ValidationRow row;
        row.mix = mix_name;
        row.policy = policy;
        row.rate = point["rate"].get<double>();
        row.seed = *seed;
        row.requests = point["requests"].get<int>();
        row.ttft_p50.measured = Get(point, "ttft_ms", "p50");
        row.ttft_p90.measured = Get(point, "ttft_ms", "p90");
        row.tpot_p50.measured = Get(point, "tpot_ms", "p50");
        row.tpot_p90.measured = Get(point, "tpot_ms", "p90");
        row.attainment.measured = point.value("attainment", 0.0);
        row.offloaded.measured =
            row.requests > 0 ? point.value("offloaded", 0) / static_cast<double>(row.requests) : 0;

        SimConfig sim;
        sim.profile = profile;
        sim.profile.shape = shape;
        sim.decode_workers = policy == "always_local" ? local_decode_workers : decode_workers;
        sim.prefill_workers = policy == "always_local" ? 0 : prefill_workers;
        sim.policy.name = policy;
        sim.policy.length_threshold = length_threshold;
        sim.policy.slo = router_slo;
        sim.policy.max_prefill_queue_ms = router_slo.ttft_ms;
        sim.rpc_ms = rpc_ms;
        sim.host_ms_per_step = host_ms;
        sim.report_interval_ms = config.report_interval_ms;
        sim.seed = row.seed;
        ASSIGN_OR_RETURN(const std::vector<measure::WorkloadRequest> work,
                         make_work(row.rate, row.requests, row.seed));
        const std::vector<SimRequest> requests = WorkloadRequests(work, objectives);
        ASSIGN_OR_RETURN(const SimResult simulated, Simulate(sim, requests));
        const PointSummary s = Summarize(simulated, row.rate, router_slo);
        row.ttft_p50.simulated = s.ttft_ms.p50;
        row.ttft_p90.simulated = s.ttft_ms.p90;
        row.tpot_p50.simulated = s.tpot_ms.p50;
        row.tpot_p90.simulated = s.tpot_ms.p90;
        row.attainment.simulated = s.attainment;
        row.offloaded.simulated =
            s.requests > 0 ? s.offloaded / static_cast<double>(s.requests) : 0;
        sweep.push_back(row);
      }
      std::sort(sweep.begin(), sweep.end(),
                [](const ValidationRow& a, const ValidationRow& b) { return a.rate < b.rate; });
      GoodputPair goodput{.mix = mix_name, .policy = policy, .goodput = {}};
      std::vector<std::pair<double, double>> measured, simulated;
      for (const ValidationRow& row : sweep) {
        measured.emplace_back(row.rate, row.attainment.measured);
        simulated.emplace_back(row.rate, row.attainment.simulated);
      }
      goodput.goodput.measured = measure::SweepGoodput(measured, config.target_attainment);
      goodput.goodput.simulated = measure::SweepGoodput(simulated, config.target_attainment);
      result.goodputs.push_back(goodput);
      bool passing = true;
      for (ValidationRow& row : sweep) {
        passing = passing && row.attainment.measured >= config.target_attainment;
        row.below_knee = passing;
        result.below_knee += passing ? 1 : 0;
        result.rows.push_back(row);
      }
    }
  }
  if (result.rows.empty()) {
    return absl::NotFoundError(absl::StrCat("--serve_dir: no rate points of a mix or trace under ",
                                            config.serve_dir, "/runs"));
  }
  result.error_ttft_p50 = MedianRelativeError(result.rows, &ValidationRow::ttft_p50);
  result.error_ttft_p90 = MedianRelativeError(result.rows, &ValidationRow::ttft_p90);
  result.error_tpot_p50 = MedianRelativeError(result.rows, &ValidationRow::tpot_p50);
  result.error_tpot_p90 = MedianRelativeError(result.rows, &ValidationRow::tpot_p90);
  std::vector<double> attainment;
  for (const ValidationRow& r : result.rows)
    if (r.below_knee)
      attainment.push_back(std::abs(r.attainment.simulated - r.attainment.measured));
  result.error_attainment = attainment.empty() ? -1 : measure::Median(attainment);
  return result;
}

std::string FormatValidation(const ValidationResult& result) {
  Table table({"mix", "policy", "rate/s", "TTFT p50 real/sim", "TTFT p90 real/sim",
               "TPOT p50 real/sim", "TPOT p90 real/sim", "attain real/sim", "offload real/sim",
               "knee"});
  auto pair = [](const MetricPair& m, int digits) {
    return absl::StrCat(absl::StrFormat("%.*f", digits, m.measured), " / ",
                        absl::StrFormat("%.*f", digits, m.simulated));
  };
  for (const ValidationRow& r : result.rows) {
    table.AddRow({r.mix, r.policy, absl::StrFormat("%.2f", r.rate), pair(r.ttft_p50, 1),
                  pair(r.ttft_p90, 1), pair(r.tpot_p50, 2), pair(r.tpot_p90, 2),
                  pair(r.attainment, 2), pair(r.offloaded, 2), r.below_knee ? "below" : "above"});
  }
  Table goodputs({"mix", "policy", "goodput real (req/s)", "goodput sim (req/s)", "sim / real"});
  for (const GoodputPair& g : result.goodputs) {
    goodputs.AddRow({g.mix, g.policy, absl::StrFormat("%.2f", g.goodput.measured),
                     absl::StrFormat("%.2f", g.goodput.simulated),
                     g.goodput.measured > 0
                         ? absl::StrFormat("%.3f", g.goodput.simulated / g.goodput.measured)
                         : std::string("-")});
  }
  std::string ratios;
  for (const auto& [mix, ratio] : CostModelOverBestFixed(result)) {
    absl::StrAppendFormat(&ratios, "%s: cost_model / best fixed policy %.3f real, %.3f simulated\n",
                          mix, ratio.measured, ratio.simulated);
  }
  std::string rpc;
  for (const auto& [mix, ms] : result.rpc_ms) absl::StrAppendFormat(&rpc, " %s %.2f ms", mix, ms);
  std::string host;
  for (const auto& [mix, ms] : result.host_ms) absl::StrAppendFormat(&host, " %s %.3f ms", mix, ms);
  auto pct = [](double e) {
    return e < 0 ? std::string("-") : absl::StrFormat("%.1f %%", 100 * e);
  };
  return absl::StrCat(
      table.ToString(), goodputs.ToString(), ratios, "RPC hop:", rpc, "; host time per step:", host,
      "\n",
      absl::StrFormat("median error over %d points below the knee: TTFT p50 %s, p90 %s; TPOT "
                      "p50 %s, p90 %s; attainment %s (targets: <= 10 %%, <= 0.05)\n",
                      result.below_knee, pct(result.error_ttft_p50), pct(result.error_ttft_p90),
                      pct(result.error_tpot_p50), pct(result.error_tpot_p90),
                      result.error_attainment < 0
                          ? std::string("-")
                          : absl::StrFormat("%.3f", result.error_attainment)));
}

std::map<std::string, MetricPair> CostModelOverBestFixed(const ValidationResult& result) {
  std::map<std::string, MetricPair> best_fixed, cost_model, out;
  for (const GoodputPair& g : result.goodputs) {
    MetricPair& m = g.policy == "cost_model" ? cost_model[g.mix] : best_fixed[g.mix];
    m.measured = std::max(m.measured, g.goodput.measured);
    m.simulated = std::max(m.simulated, g.goodput.simulated);
  }
  for (const auto& [mix, c] : cost_model) {
    if (!best_fixed.contains(mix)) continue;
    const MetricPair& f = best_fixed[mix];
    out[mix] = {.measured = f.measured > 0 ? c.measured / f.measured : 0,
                .simulated = f.simulated > 0 ? c.simulated / f.simulated : 0};
  }
  return out;
}

nlohmann::json ValidationJson(const ValidationResult& result) {
  nlohmann::json j;
  for (const GoodputPair& g : result.goodputs) {
    j["goodput"][g.mix][g.policy] = {{"measured", g.goodput.measured},
                                     {"simulated", g.goodput.simulated}};
  }
  for (const auto& [mix, ratio] : CostModelOverBestFixed(result)) {
    j["goodput_cost_model_over_best_fixed"][mix] = {{"measured", ratio.measured},
                                                    {"simulated", ratio.simulated}};
  }
  j["sim_error_ttft_p50"] = result.error_ttft_p50;
  j["sim_error_ttft_p90"] = result.error_ttft_p90;
  j["sim_error_tpot_p50"] = result.error_tpot_p50;
  j["sim_error_tpot_p90"] = result.error_tpot_p90;
  j["sim_error_attainment"] = result.error_attainment;
  j["points_below_knee"] = result.below_knee;
  j["rpc_ms"] = result.rpc_ms;
  j["host_ms_per_step"] = result.host_ms;
  const bool latency_met = result.error_ttft_p50 >= 0 && result.error_ttft_p50 <= 0.1 &&
                           result.error_ttft_p90 <= 0.1 && result.error_tpot_p50 <= 0.1 &&
                           result.error_tpot_p90 <= 0.1;
  j["sim_error_latency_met"] = latency_met;
  j["sim_error_attainment_met"] = result.error_attainment >= 0 && result.error_attainment <= 0.05;
  auto pair = [](const MetricPair& m) {
    return nlohmann::json{{"measured", m.measured}, {"simulated", m.simulated}};
  };
  for (const ValidationRow& r : result.rows) {
    j["points"].push_back({{"mix", r.mix},
                           {"policy", r.policy},
                           {"rate", r.rate},
                           {"seed", r.seed},
                           {"requests", r.requests},
                           {"below_knee", r.below_knee},
                           {"ttft_p50_ms", pair(r.ttft_p50)},
                           {"ttft_p90_ms", pair(r.ttft_p90)},
                           {"tpot_p50_ms", pair(r.tpot_p50)},
                           {"tpot_p90_ms", pair(r.tpot_p90)},
                           {"attainment", pair(r.attainment)},
                           {"offloaded_share", pair(r.offloaded)}});
  }
  return j;
}

}  // namespace pdserve::sim
