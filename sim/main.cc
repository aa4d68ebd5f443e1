// pdserve-sim: the cluster simulator (sim/simulator.h) and the capacity planner.
//   pdserve-sim run  --profile P (--trace F | --mix M --rate R --requests N) [--policy ...]
//       simulates one configuration at one rate: prints the rate point and writes
//       summary.json (and requests.csv) under --out.
//   pdserve-sim plan --profile P --trace F --gpus N --slo_ttft X --slo_tpot Y
//       searches prefill:decode splits x policies for the best goodput per GPU (planner.h).
//   pdserve-sim family --profile P [--cells smoke|full|CELL,...] [--family_gpus 8,32]
//       plans every workload cell (and --family_traces) and compares cost_model with the best
//       fixed policy in each (family.h).
//   pdserve-sim validate --profile P --serve_dir DIR
//       simulates every rate point `pdserve-bench serve --out DIR` measured and prints the
//       errors (validate.h).
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/text_table.h"
#include "router/placement/placement_policy.h"
#include "router/rebalance_flags.h"
#include "sim/family.h"
#include "sim/planner.h"
#include "sim/schedule.h"
#include "sim/sim_summary.h"
#include "sim/sim_workload.h"
#include "sim/steady_state.h"
#include "sim/validate.h"
#include "sim/workload_family.h"
#include "tools/measure/report.h"

ABSL_DECLARE_FLAG(std::string, log_level);

ABSL_FLAG(std::string, profile, "",
          "Calibration (cost_model.json from `pdserve-bench interference`, or a GPU profile under "
          "deploy/profiles/); its \"cluster\" object, if any, gives the worker shape (required).");
ABSL_FLAG(std::string, out, "", "Directory for summary.json and the per-request CSV (or plots).");
ABSL_FLAG(std::string, trace, "", "A production trace (bench/traces/) to replay.");
ABSL_FLAG(double, trace_start, 0, "Trace window start, seconds of trace time.");
ABSL_FLAG(double, trace_duration, 0, "Trace window length, seconds of trace time (0: to the end).");
ABSL_FLAG(double, length_scale, 1, "Trace prompt and output lengths are multiplied by this.");
ABSL_FLAG(int, max_context, 0,
          "Trace requests are cut to this many prompt + output tokens (0: the worker's context).");
ABSL_FLAG(bool, spread_ties, true,
          "Spread trace requests that share a timestamp (Mooncake's ~3 s "
          "quantization) until the next one.");
ABSL_FLAG(std::string, mix, "mixed",
          "Without --trace: the serve bench's mix (chat, documents, mixed).");
ABSL_FLAG(std::string, workload, "",
          "Without --trace: a cell of the synthetic workload family "
          "(prompt/output/sharing/arrivals: short|long|bimodal|heavytail / tiny|medium|long / "
          "none|multiturn|system / poisson|bursty; sim/workload_family.h) instead of --mix.");
ABSL_FLAG(std::string, schedule, "",
          "Without --trace: phases of workload cells one after the other, each at its own rate "
          "for its own time: CELL@RATE:SECONDS,... (a shifting mix, a rate swing; "
          "sim/schedule.h). Judged as it runs (no steady-state repetition: --warmup_s, "
          "--measure_s and --cooldown_s do not apply); --rate multiplies every phase's rate; "
          "goodput needs the target in every phase.");
ABSL_FLAG(int, requests, 200, "Without --trace: requests of the mix or workload cell.");
ABSL_FLAG(double, rate, 1,
          "run: with --trace or --workload, a multiplier of its own rate; with --mix, requests per "
          "second.");
ABSL_FLAG(std::string, policy, "cost_model",
          "run: cost_model, always_local, always_offload or length_threshold.");
ABSL_FLAG(int, length_threshold, 1024, "run: length_threshold's N (uncached tokens).");
// The router's own policy knobs, same names and meaning as pdserve-router's flags.
ABSL_FLAG(int, min_offload_tokens, 256,
          "cost_model: prompts with fewer uncached tokens prefill locally unless their chunk would "
          "push running streams past --slo_tpot (the router's flag).");
ABSL_FLAG(int, min_tpot_offload_tokens, 32,
          "cost_model: prompts with fewer uncached tokens always prefill locally (the router's "
          "flag).");
ABSL_FLAG(
    double, tpot_headroom, pdserve::router::PolicyConfig{}.tpot_headroom,
    "cost_model: local prefills may stretch the running streams' predicted mean TPOT to "
    "this fraction of their objective; past it long prompts are offloaded (the router's flag).");
ABSL_FLAG(double, max_prefill_queue_ms, 1000,
          "cost_model: past this much prefill-worker queue, ms, the delay an offload adds to the "
          "offloads behind it counts whole (the router's --max_prefill_queue).");
ABSL_FLAG(std::string, decode_balance, "streams",
          "A decode worker's load when placing: streams (request count) or work (predicted "
          "step time); the router's flag.");
ABSL_FLAG(int, decode_workers, 1, "run: decode workers.");
ABSL_FLAG(int, prefill_workers, 1, "run: prefill workers.");
ABSL_FLAG(double, slo_ttft, 2000, "TTFT objective, ms (every request's, sent with it).");
ABSL_FLAG(std::string, slo_classes, "",
          "Classes of objectives mixed in the workload, NAME:TTFT_MS:TPOT_MS:SHARE,... (e.g. "
          "interactive:1000:25:0.5,batch:10000:100:0.5): each request gets one by share (a "
          "follow-up its conversation's) and sends its objectives; goodput then needs the "
          "target attainment in every class. --slo_ttft/--slo_tpot stay the router's default.");
ABSL_FLAG(double, slo_tpot, 100, "TPOT objective, ms.");
ABSL_FLAG(double, rpc_ms, 0.3, "Latency of one RPC hop, ms.");
ABSL_FLAG(double, report_interval_ms, 100, "Workers' load report interval, ms.");
ABSL_FLAG(bool, bulk, false, "Ship KV after the whole prefill instead of layer by layer.");
ABSL_FLAG(double, step_jitter, 0, "Log-normal sigma of step times around the calibration.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of prompts, mixes and jitter.");
ABSL_FLAG(int, gpus, 8, "plan: GPUs to split into prefill and decode workers.");
ABSL_FLAG(bool, rebalance, false,
          "Live rebalancing (the router's --rebalance=on): every worker may switch role, the "
          "split is where it starts; the planner's settings below.");
ABSL_FLAG(std::vector<std::string>, policies,
          std::vector<std::string>({"always_local", "always_offload", "length_threshold",
                                    "cost_model"}),
          "plan: policies to search.");
ABSL_FLAG(std::vector<std::string>, thresholds,
          std::vector<std::string>({"256", "512", "1024", "2048", "4096", "8192"}),
          "plan: length_threshold's N values to try.");
ABSL_FLAG(int, bisect_steps, 4, "plan: bisections of the rate between passing and failing.");
ABSL_FLAG(int, split_step, 1,
          "plan: try every Nth prefill:decode split first, then every split between the "
          "neighbours of each policy's best (1: every split).");
ABSL_FLAG(bool, per_quartile, false,
          "plan: goodput also requires --target_attainment in each prompt-length quartile (no "
          "configuration passes by giving up the longest prompts).");
ABSL_FLAG(int, jobs, 1,
          "plan: searches run at once, on as many threads (the answer does not depend on it).");
ABSL_FLAG(double, warmup_s, pdserve::sim::SteadyState{}.warmup_s,
          "run, plan: virtual seconds of load before the measured requests (the window's end).");
ABSL_FLAG(double, measure_s, pdserve::sim::SteadyState{}.measure_s,
          "run, plan: the window is repeated until the measured arrivals span this many virtual "
          "seconds (0, run only: the window once, every request measured: a burst, not a steady "
          "state).");
ABSL_FLAG(double, cooldown_s, pdserve::sim::SteadyState{}.cooldown_s,
          "run, plan: virtual seconds of load after the measured requests (the window's start).");
ABSL_FLAG(double, target_attainment, 0.9, "plan, validate: SLO attainment that counts as goodput.");
ABSL_FLAG(std::string, cells, "smoke",
          "family: the workload cells: smoke (4 cells), full (72), or a comma-separated list of "
          "cells (--workload's form).");
ABSL_FLAG(std::vector<std::string>, family_traces, {},
          "family: traces planned beside the cells (each its --trace_start/--trace_duration "
          "window).");
ABSL_FLAG(std::vector<std::string>, family_gpus, std::vector<std::string>({"8"}),
          "family: the GPU counts each workload is planned at.");
ABSL_FLAG(double, min_ratio, 0,
          "family: exit with status 3 when cost_model's goodput over the best fixed policy's is "
          "below this in any cell (0: never).");
ABSL_FLAG(std::string, serve_dir, "", "validate: the output directory of `pdserve-bench serve`.");
ABSL_FLAG(std::string, model, "",
          "validate: the model the serve bench ran (empty: the one its summary.json names).");
ABSL_FLAG(double, validate_rpc_ms, -1,
          "validate: one RPC hop, ms (negative: calibrated so that the simulated unloaded TTFT "
          "matches the serve bench's unloaded pass).");
ABSL_FLAG(double, validate_host_ms, -1,
          "validate: host time per decode step, ms (negative: calibrated so that the simulated "
          "unloaded TPOT matches the serve bench's).");
ABSL_FLAG(double, host_ms_per_step, 0,
          "run, plan: host time a decode worker spends around each forward, ms (the profile "
          "times the forward alone).");
ABSL_FLAG(uint64_t, serve_seed, 2026,
          "validate: the serve bench's --seed, for rate points that do not record theirs.");

namespace pdserve::sim {
namespace {

constexpr char kUsage[] =
    "pdserve-sim run|plan|family|validate --profile FILE [--trace FILE | --mix NAME | --workload "
    "CELL | --serve_dir DIR] "
    "[flags]\n"
    "Simulates a pdserve cluster in virtual time on the router's and schedulers' own code.";

absl::StatusOr<std::vector<int>> Ints(const std::vector<std::string>& values, const char* flag) {
  std::vector<int> out;
  for (const std::string& v : values) {
    int i = 0;
    if (!absl::SimpleAtoi(v, &i) || i < 1)
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", v, "' is not a count >= 1"));
    out.push_back(i);
  }
  return out;
}

// --slo_classes, if any, over `requests`.
absl::Status ApplySloClasses(std::vector<SimRequest>* requests) {
  ASSIGN_OR_RETURN(const std::vector<SloClass> classes,
                   ParseSloClasses(absl::GetFlag(FLAGS_slo_classes)));
  AssignSloClasses(classes, absl::GetFlag(FLAGS_seed), requests);
  return absl::OkStatus();
}

// The workload the flags name, at the trace's own rate (or --rate for a mix).
absl::StatusOr<std::vector<SimRequest>> LoadWorkload(const SimProfile& profile,
                                                     const router::SloConfig& slo) {
  const int vocab = profile.shape.vocab_size;
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  std::vector<SimRequest> requests;
  if (!absl::GetFlag(FLAGS_trace).empty()) {
    ASSIGN_OR_RETURN(const measure::Trace trace, measure::ReadTrace(absl::GetFlag(FLAGS_trace)));
    measure::TraceSelection sel;
    sel.start_s = absl::GetFlag(FLAGS_trace_start);
    sel.duration_s = absl::GetFlag(FLAGS_trace_duration);
    sel.length_scale = absl::GetFlag(FLAGS_length_scale);
    sel.max_context = absl::GetFlag(FLAGS_max_context) > 0 ? absl::GetFlag(FLAGS_max_context)
                                                           : profile.shape.max_context_tokens;
    sel.spread_ties = absl::GetFlag(FLAGS_spread_ties);
    ASSIGN_OR_RETURN(const measure::Trace selected, measure::SelectFromTrace(trace, sel));
    requests = TraceRequests(selected, vocab, seed);
  } else if (!absl::GetFlag(FLAGS_schedule).empty()) {
    ASSIGN_OR_RETURN(const std::vector<SchedulePhase> phases,
                     ParseSchedule(absl::GetFlag(FLAGS_schedule)));
    requests = ScheduleRequests(phases, seed, vocab, profile.shape.max_context_tokens);
  } else if (!absl::GetFlag(FLAGS_workload).empty()) {
    ASSIGN_OR_RETURN(const WorkloadCell cell, ParseWorkloadCell(absl::GetFlag(FLAGS_workload)));
    requests = FamilyRequests(cell, absl::GetFlag(FLAGS_requests), seed, vocab,
                              profile.shape.max_context_tokens);
  } else {
    ASSIGN_OR_RETURN(const measure::MixSpec mix,
                     measure::Mix(absl::GetFlag(FLAGS_mix), profile.shape.max_context_tokens));
    requests = WorkloadRequests(measure::MakeWorkload(mix, absl::GetFlag(FLAGS_rate),
                                                      absl::GetFlag(FLAGS_requests), seed, vocab),
                                {});
  }
  for (SimRequest& r : requests) r.slo = slo;
  RETURN_IF_ERROR(ApplySloClasses(&requests));
  if (requests.empty()) return absl::InvalidArgumentError("the workload has no requests");
  return requests;
}

absl::StatusOr<SimConfig> BaseConfig() {
  SimConfig c;
  if (absl::GetFlag(FLAGS_profile).empty())
    return absl::InvalidArgumentError(
        "--profile: required (a cost_model.json or deploy/profiles/*.json)");
  ASSIGN_OR_RETURN(c.profile, LoadSimProfile(absl::GetFlag(FLAGS_profile)));
  c.rpc_ms = absl::GetFlag(FLAGS_rpc_ms);
  c.report_interval_ms = absl::GetFlag(FLAGS_report_interval_ms);
  c.layerwise = !absl::GetFlag(FLAGS_bulk);
  c.step_jitter = absl::GetFlag(FLAGS_step_jitter);
  c.host_ms_per_step = absl::GetFlag(FLAGS_host_ms_per_step);
  if (c.host_ms_per_step < 0) return absl::InvalidArgumentError("--host_ms_per_step: must be >= 0");
  c.seed = absl::GetFlag(FLAGS_seed);
  c.policy.slo.ttft_ms = absl::GetFlag(FLAGS_slo_ttft);
  c.policy.slo.tpot_ms = absl::GetFlag(FLAGS_slo_tpot);
  c.policy.length_threshold = absl::GetFlag(FLAGS_length_threshold);
  c.policy.min_offload_tokens = absl::GetFlag(FLAGS_min_offload_tokens);
  c.policy.min_tpot_offload_tokens = absl::GetFlag(FLAGS_min_tpot_offload_tokens);
  c.policy.tpot_headroom = absl::GetFlag(FLAGS_tpot_headroom);
  c.policy.max_prefill_queue_ms = absl::GetFlag(FLAGS_max_prefill_queue_ms);
  if (absl::Status s = c.policy.Validate(); !s.ok()) return s;
  ASSIGN_OR_RETURN(
      c.placer.decode_balance,
      router::ParseDecodeBalance(absl::GetFlag(FLAGS_decode_balance), "--decode_balance"));
  if (absl::GetFlag(FLAGS_rebalance)) {
    c.rebalance = router::RebalanceConfigFromFlags();
    RETURN_IF_ERROR(c.rebalance->Validate());
  }
  return c;
}

absl::StatusOr<SteadyState> SteadyStateFlags() {
  // A schedule is its own timeline: its phases run once, as they are.
  if (!absl::GetFlag(FLAGS_schedule).empty())
    return SteadyState{.warmup_s = 0, .measure_s = 0, .cooldown_s = 0};
  SteadyState s{.warmup_s = absl::GetFlag(FLAGS_warmup_s),
                .measure_s = absl::GetFlag(FLAGS_measure_s),
                .cooldown_s = absl::GetFlag(FLAGS_cooldown_s)};
  RETURN_IF_ERROR(s.Validate());
  return s;
}

absl::Status WriteCsv(const std::string& path, const SimResult& result) {
  std::ofstream out(path);
  out << "request,kind,measured,ok,sent_ms,prompt_tokens,output_tokens,ttft_ms,tpot_ms,e2e_ms,"
         "offloaded,fell_back,decode_worker,cached_tokens,reason,predicted_interference_ms,"
         "predicted_offload_cost_ms,predicted_ttft_local_ms,predicted_ttft_offload_ms,"
         "running_decodes,error\n";
  for (size_t i = 0; i < result.requests.size(); ++i) {
    const SimRequestResult& r = result.requests[i];
    out << i << ',' << r.kind << ',' << (r.measured ? 1 : 0) << ',' << (r.ok ? 1 : 0) << ','
        << r.sent_ms << ',' << r.prompt_tokens << ',' << r.output_tokens << ',' << r.ttft_ms << ','
        << r.tpot_ms << ',' << r.e2e_ms << ',' << (r.offloaded ? 1 : 0) << ','
        << (r.fell_back ? 1 : 0) << ',' << r.decode_worker << ',' << r.cached_tokens << ','
        << r.reason << ',' << r.predicted.predicted_interference_ms << ','
        << r.predicted.predicted_offload_cost_ms << ',' << r.predicted.predicted_ttft_local_ms
        << ',' << r.predicted.predicted_ttft_offload_ms << ',' << r.predicted.running_decodes
        << ",\"" << absl::StrReplaceAll(r.error, {{"\"", "'"}}) << "\"\n";
  }
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// The planner's role switches, one per line (with rebalancing): when each was ordered and
// done, so that a run's split can be followed against its phases.
absl::Status WriteSwitchesCsv(const std::string& path, const SimResult& result) {
  std::ofstream out(path);
  out << "worker,to,ordered_ms,done_ms,reason\n";
  for (const SimRoleSwitch& s : result.switches) {
    out << "worker-" << s.worker << ','
        << (s.to == router::WorkerRole::kDecode ? "decode" : "prefill") << ',' << s.ordered_ms
        << ',' << s.done_ms << ",\"" << s.reason << "\"\n";
  }
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status Run() {
  ASSIGN_OR_RETURN(SimConfig config, BaseConfig());
  config.policy.name = absl::GetFlag(FLAGS_policy);
  config.decode_workers = absl::GetFlag(FLAGS_decode_workers);
  config.prefill_workers = absl::GetFlag(FLAGS_prefill_workers);
  // A trace or a workload cell has rates of its own (a cell's is one request a second): --rate
  // multiplies them. A mix is generated at --rate.
  if (!absl::GetFlag(FLAGS_trace).empty() || !absl::GetFlag(FLAGS_workload).empty() ||
      !absl::GetFlag(FLAGS_schedule).empty())
    config.rate_scale = absl::GetFlag(FLAGS_rate);
  ASSIGN_OR_RETURN(const std::vector<SimRequest> window,
                   LoadWorkload(config.profile, config.policy.slo));
  ASSIGN_OR_RETURN(const SteadyState steady_state, SteadyStateFlags());
  ASSIGN_OR_RETURN(const std::vector<SimRequest> requests,
                   SteadyStateRequests(window, config.rate_scale, steady_state,
                                       config.profile.shape.vocab_size));
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(const SimResult result, Simulate(config, requests));
  const double wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  const double rate = OfferedRate(window) * config.rate_scale;
  const PointSummary s = Summarize(result, rate, config.policy.slo);
  Table table({"policy", "decode:prefill", "rate/s", "measured", "attainment", "worst quartile",
               "TTFT p50/p90 ms", "TPOT p50/p90 ms", "offloaded", "virtual s", "wall s"});
  table.AddRow({config.policy.name,
                absl::StrCat(config.decode_workers, ":", config.prefill_workers), Fixed(rate, 3),
                absl::StrCat(s.requests), Fixed(s.attainment, 3),
                Fixed(s.worst_quartile_attainment, 3),
                absl::StrCat(Fixed(s.ttft_ms.p50, 1), " / ", Fixed(s.ttft_ms.p90, 1)),
                absl::StrCat(Fixed(s.tpot_ms.p50, 2), " / ", Fixed(s.tpot_ms.p90, 2)),
                absl::StrCat(s.offloaded), Fixed(result.counters.virtual_s, 1), Fixed(wall_s, 2)});
  std::printf("%s", table.ToString().c_str());
  for (const auto& [name, attainment] : s.class_attainment)
    std::printf("class %s: attainment %.3f\n", name.c_str(), attainment);
  if (config.rebalance.has_value())
    std::printf("role switches: %llu\n",
                static_cast<unsigned long long>(result.counters.role_switches));
  if (s.phase_attainment.size() > 1) {
    for (const auto& [phase, attainment] : s.phase_attainment)
      std::printf("phase %d: attainment %.3f\n", phase, attainment);
  }
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return absl::OkStatus();
  nlohmann::json summary = {{"profile", config.profile.path},
                            {"policy", config.policy.name},
                            {"simulated_requests", requests.size()},
                            {"steady_state", ToJson(steady_state)},
                            {"decode_workers", config.decode_workers},
                            {"prefill_workers", config.prefill_workers},
                            {"point", ToJson(s)},
                            {"counters", ToJson(result.counters)}};
  RETURN_IF_ERROR(measure::WriteSummary(out, summary));
  if (config.rebalance.has_value())
    RETURN_IF_ERROR(WriteSwitchesCsv(out + "/switches.csv", result));
  return WriteCsv(out + "/requests.csv", result);
}

absl::Status Plan() {
  ASSIGN_OR_RETURN(const SimConfig base, BaseConfig());
  PlanConfig plan;
  plan.base = base;
  plan.gpus = absl::GetFlag(FLAGS_gpus);
  plan.policies = absl::GetFlag(FLAGS_policies);
  ASSIGN_OR_RETURN(plan.thresholds, Ints(absl::GetFlag(FLAGS_thresholds), "thresholds"));
  plan.bisect_steps = absl::GetFlag(FLAGS_bisect_steps);
  plan.split_step = absl::GetFlag(FLAGS_split_step);
  plan.jobs = absl::GetFlag(FLAGS_jobs);
  plan.per_quartile = absl::GetFlag(FLAGS_per_quartile);
  if (plan.split_step < 1) return absl::InvalidArgumentError("--split_step: must be >= 1");
  if (plan.jobs < 1 || plan.jobs > 256)
    return absl::InvalidArgumentError("--jobs: must be in [1, 256]");
  ASSIGN_OR_RETURN(plan.steady_state, SteadyStateFlags());
  plan.timeline = !absl::GetFlag(FLAGS_schedule).empty();
  plan.target_attainment = absl::GetFlag(FLAGS_target_attainment);
  plan.out_dir = absl::GetFlag(FLAGS_out);
  const std::string trace_path = absl::GetFlag(FLAGS_trace);
  if (!trace_path.empty()) {
    plan.trace_name = trace_path.substr(trace_path.rfind('/') + 1);  // npos + 1: all of it.
  } else if (plan.timeline) {
    plan.trace_name = "schedule";
  } else if (!absl::GetFlag(FLAGS_workload).empty()) {
    plan.trace_name = absl::StrReplaceAll(absl::GetFlag(FLAGS_workload), {{"/", "_"}});
  } else {
    plan.trace_name = "mix_" + absl::GetFlag(FLAGS_mix);
  }
  ASSIGN_OR_RETURN(const std::vector<SimRequest> requests,
                   LoadWorkload(base.profile, base.policy.slo));
  ASSIGN_OR_RETURN(const PlanResult result, RunPlan(plan, requests));
  std::printf("%s", FormatPlan(result).c_str());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<WorkloadCell>> FamilyCells() {
  const std::string cells = absl::GetFlag(FLAGS_cells);
  if (cells == "smoke") return SmokeFamily();
  if (cells == "full") return FullFamily();
  std::vector<WorkloadCell> out;
  for (absl::string_view name : absl::StrSplit(cells, ',', absl::SkipEmpty())) {
    ASSIGN_OR_RETURN(WorkloadCell c, ParseWorkloadCell(std::string(name)));
    out.push_back(c);
  }
  return out;
}

// Exit status 3: a cell below --min_ratio (the regression gate CI runs).
absl::StatusOr<int> Family() {
  ASSIGN_OR_RETURN(const SimConfig base, BaseConfig());
  FamilyConfig family;
  family.plan.base = base;
  family.plan.policies = absl::GetFlag(FLAGS_policies);
  ASSIGN_OR_RETURN(family.plan.thresholds, Ints(absl::GetFlag(FLAGS_thresholds), "thresholds"));
  family.plan.bisect_steps = absl::GetFlag(FLAGS_bisect_steps);
  family.plan.split_step = absl::GetFlag(FLAGS_split_step);
  family.plan.jobs = absl::GetFlag(FLAGS_jobs);
  family.plan.per_quartile = absl::GetFlag(FLAGS_per_quartile);
  family.plan.target_attainment = absl::GetFlag(FLAGS_target_attainment);
  family.plan.progress = false;
  if (family.plan.split_step < 1) return absl::InvalidArgumentError("--split_step: must be >= 1");
  if (family.plan.jobs < 1 || family.plan.jobs > 256)
    return absl::InvalidArgumentError("--jobs: must be in [1, 256]");
  ASSIGN_OR_RETURN(family.plan.steady_state, SteadyStateFlags());
  ASSIGN_OR_RETURN(family.gpus, Ints(absl::GetFlag(FLAGS_family_gpus), "family_gpus"));
  family.out_dir = absl::GetFlag(FLAGS_out);
  const SimProfile& profile = base.profile;
  ASSIGN_OR_RETURN(const std::vector<WorkloadCell> cells, FamilyCells());
  for (const WorkloadCell& cell : cells) {
    FamilyWorkload w{
        .name = cell.Name(),
        .requests = FamilyRequests(cell, absl::GetFlag(FLAGS_requests), absl::GetFlag(FLAGS_seed),
                                   profile.shape.vocab_size, profile.shape.max_context_tokens)};
    for (SimRequest& r : w.requests) r.slo = base.policy.slo;
    RETURN_IF_ERROR(ApplySloClasses(&w.requests));
    family.workloads.push_back(std::move(w));
  }
  for (const std::string& path : absl::GetFlag(FLAGS_family_traces)) {
    ASSIGN_OR_RETURN(const measure::Trace trace, measure::ReadTrace(path));
    measure::TraceSelection sel;
    sel.start_s = absl::GetFlag(FLAGS_trace_start);
    sel.duration_s = absl::GetFlag(FLAGS_trace_duration);
    sel.length_scale = absl::GetFlag(FLAGS_length_scale);
    sel.max_context = profile.shape.max_context_tokens;
    sel.spread_ties = absl::GetFlag(FLAGS_spread_ties);
    ASSIGN_OR_RETURN(const measure::Trace selected, measure::SelectFromTrace(trace, sel));
    FamilyWorkload w{
        .name = path.substr(path.rfind('/') + 1),
        .requests = TraceRequests(selected, profile.shape.vocab_size, absl::GetFlag(FLAGS_seed))};
    for (SimRequest& r : w.requests) r.slo = base.policy.slo;
    RETURN_IF_ERROR(ApplySloClasses(&w.requests));
    family.workloads.push_back(std::move(w));
  }
  ASSIGN_OR_RETURN(const FamilyResult result, RunFamily(family));
  std::printf("%s", FormatFamily(result).c_str());
  const double min_ratio = absl::GetFlag(FLAGS_min_ratio);
  if (min_ratio > 0 && result.worst_ratio < min_ratio) {
    std::fprintf(stderr,
                 "pdserve-sim family: cost_model reached %.3fx the best fixed policy on %s, below "
                 "--min_ratio %.3f\n",
                 result.worst_ratio, result.worst_cell.c_str(), min_ratio);
    return 3;
  }
  return 0;
}

absl::Status ValidateCommand() {
  ASSIGN_OR_RETURN(const SimConfig base, BaseConfig());
  ValidateConfig config;
  config.serve_dir = absl::GetFlag(FLAGS_serve_dir);
  if (config.serve_dir.empty())
    return absl::InvalidArgumentError("--serve_dir: required for validate");
  config.model_dir = absl::GetFlag(FLAGS_model);
  config.profile = base.profile;
  config.serve_seed = absl::GetFlag(FLAGS_serve_seed);
  config.length_threshold = absl::GetFlag(FLAGS_length_threshold);
  config.rpc_ms = absl::GetFlag(FLAGS_validate_rpc_ms);
  config.host_ms = absl::GetFlag(FLAGS_validate_host_ms);
  config.report_interval_ms = base.report_interval_ms;
  config.target_attainment = absl::GetFlag(FLAGS_target_attainment);
  ASSIGN_OR_RETURN(const ValidationResult result, Validate(config));
  std::printf("%s", FormatValidation(result).c_str());
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return absl::OkStatus();
  nlohmann::json summary = ValidationJson(result);
  summary["profile"] = base.profile.path;
  summary["serve_dir"] = config.serve_dir;
  return measure::WriteSummary(out, summary);
}

}  // namespace
}  // namespace pdserve::sim

int main(int argc, char** argv) {
  const std::vector<std::string> args = pdserve::ParseCommandLine(argc, argv, pdserve::sim::kUsage);
  // The router logs a line per placement; a simulation makes thousands a second, so unless
  // asked for, only warnings.
  if (absl::GetFlag(FLAGS_log_level) == "info")
    pdserve::SetMinLogSeverity(pdserve::LogSeverity::kWarning);
  const std::string command = args.size() > 1 ? args[1] : "";
  absl::Status status;
  if (command == "run") {
    status = pdserve::sim::Run();
  } else if (command == "plan") {
    status = pdserve::sim::Plan();
  } else if (command == "family") {
    absl::StatusOr<int> code = pdserve::sim::Family();
    if (code.ok() && *code != 0) return *code;
    status = code.status();
  } else if (command == "validate") {
    status = pdserve::sim::ValidateCommand();
  } else {
    status = absl::InvalidArgumentError(absl::StrCat(
        "unknown command '", command, "': one of run, plan, family, validate (see --help)"));
  }
  if (!status.ok()) {
    std::fprintf(stderr, "pdserve-sim: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
