#include "sim/planner.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/text_table.h"
#include "sim/sim_workload.h"
#include "tools/measure/report.h"
#include "tools/measure/subprocess.h"

namespace pdserve::sim {
namespace {

// A bar on a terminal, a line per step elsewhere (CI logs). Searches on several threads share
// it; the total grows as a coarse-to-fine search adds splits.
class ProgressBar {
 public:
  ProgressBar(int total, bool enabled) : total_(total), enabled_(enabled), tty_(isatty(2) != 0) {}
  void AddTotal(int more) {
    absl::MutexLock lock(&mu_);
    total_ += more;
  }
  void Step(const std::string& what) {
    absl::MutexLock lock(&mu_);
    ++done_;
    if (!enabled_) return;
    constexpr int kWidth = 30;
    const int filled = total_ == 0 ? kWidth : std::min(kWidth, done_ * kWidth / total_);
    const std::string bar =
        absl::StrCat("[", std::string(filled, '#'), std::string(kWidth - filled, ' '), "] ", done_,
                     "/", total_, " ", what);
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s%s", bar.c_str(), done_ == total_ ? "\n" : "");
    } else {
      std::fprintf(stderr, "%s\n", bar.c_str());
    }
    std::fflush(stderr);
  }

 private:
  absl::Mutex mu_;
  int total_ ABSL_GUARDED_BY(mu_);
  const bool enabled_;
  const bool tty_;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
};

bool IsFixed(const std::string& policy) { return policy != "cost_model"; }

absl::Status Plot(const PlanConfig& plan, const PlanResult& result) {
  const std::string dir = plan.out_dir;
  std::ofstream data(dir + "/plan.dat");
  std::vector<std::string> plots;
  int index = 0;
  for (const auto& [policy, best] : result.best_of_policy) {
    const PlanCandidate& c = result.candidates[best];
    data << "# " << c.Name() << "\n";
    for (const PointSummary& p : c.points) {
      data << p.rate / plan.gpus << " " << p.rate * p.attainment / plan.gpus << " " << p.attainment
           << "\n";
    }
    data << "\n\n";
    plots.push_back(absl::StrCat("'", dir, "/plan.dat' index ", index++,
                                 " using 1:2 with linespoints title '", c.Name(), "'"));
  }
  data.close();  // gnuplot reads it next.
  const std::string script = absl::StrCat(
      "set terminal pngcairo size 900,500 noenhanced\nset output '", dir, "/plan.png'\n",
      "set title 'goodput vs offered rate, each policy at its best split (", plan.trace_name, ", ",
      plan.gpus, " GPUs)'\nset key top left\nset grid\nset logscale x\n",
      "set xlabel 'offered requests/s per GPU'\nset ylabel 'requests/s per GPU meeting both "
      "SLOs'\n",
      "plot ", absl::StrJoin(plots, ", "), "\n");
  {
    std::ofstream out(dir + "/plan.gnuplot");
    out << script;
  }
  auto run = measure::RunCommand({"gnuplot", dir + "/plan.gnuplot"}, {}, absl::Seconds(60));
  return run.ok() ? absl::OkStatus() : run.status();
}

// One search per (policy, threshold) over the prefill:decode splits, run on one thread.
struct Chain {
  PlanCandidate proto;  // Policy and threshold.
  int min_prefill = 0, max_prefill = 0;
  std::vector<PlanCandidate> searched;
  int simulations = 0;
  absl::Status status;
};

// Searches `chain`'s splits: every plan.split_step-th, then every split between the best
// one's neighbours; each split's search starts at the previous one's goodput.
void SearchSplits(const PlanConfig& plan, const std::vector<SimRequest>& requests, int workers,
                  double trace_rate, ProgressBar& bar, Chain& chain) {
  const int step = std::max(1, plan.split_step);
  double from = 1.0;  // Each search starts at the previous split's goodput.
  auto search = [&](int p) -> absl::StatusOr<double> {
    PlanCandidate c = chain.proto;
    c.prefill_workers = p;
    c.decode_workers = workers - p;
    SimConfig config = plan.base;
    config.policy.name = c.policy;
    if (c.threshold > 0) config.policy.length_threshold = c.threshold;
    config.decode_workers = c.decode_workers;
    config.prefill_workers = c.prefill_workers;
    ASSIGN_OR_RETURN(const double multiple,
                     SearchGoodput(config, requests, from, plan, &c.points, &chain.simulations));
    if (multiple > 0) from = multiple;
    c.goodput = multiple * trace_rate;
    c.goodput_per_gpu = c.goodput / plan.gpus;
    bar.Step(c.Name());
    chain.searched.push_back(std::move(c));
    return multiple;
  };
  std::map<int, double> tried;  // Prefill workers -> goodput multiple.
  auto try_splits = [&](const std::vector<int>& splits) -> absl::Status {
    std::vector<int> fresh;
    for (int p : splits) {
      if (p >= chain.min_prefill && p <= chain.max_prefill && !tried.contains(p) &&
          std::find(fresh.begin(), fresh.end(), p) == fresh.end())
        fresh.push_back(p);
    }
    bar.AddTotal(static_cast<int>(fresh.size()));
    for (int p : fresh) {
      ASSIGN_OR_RETURN(tried[p], search(p));
    }
    return absl::OkStatus();
  };
  std::vector<int> coarse;
  for (int p = chain.min_prefill; p <= chain.max_prefill; p += step) coarse.push_back(p);
  coarse.push_back(chain.max_prefill);
  chain.status = try_splits(coarse);
  if (chain.status.ok() && step > 1) {
    // Every split between the best coarse one's neighbours (the fewest prefill workers among
    // equals): the peak lies there when goodput rises then falls over the splits.
    int best = tried.begin()->first;
    for (const auto& [p, multiple] : tried)
      if (multiple > tried[best]) best = p;
    std::vector<int> around;
    for (int p = best - step + 1; p < best + step; ++p) around.push_back(p);
    chain.status = try_splits(around);
  }
}

}  // namespace

std::string PlanCandidate::Name() const {
  return absl::StrCat(policy, threshold > 0 ? absl::StrCat("(N=", threshold, ")") : "", " ",
                      prefill_workers, "P:", decode_workers, "D");
}

absl::StatusOr<double> SearchGoodput(const SimConfig& config,
                                     const std::vector<SimRequest>& requests, double start_multiple,
                                     const PlanConfig& plan, std::vector<PointSummary>* points,
                                     int* simulations) {
  const double base_rate = OfferedRate(requests);
  auto attained = [&](double multiple) -> absl::StatusOr<bool> {
    SimConfig c = config;
    c.rate_scale = multiple;
    ASSIGN_OR_RETURN(const std::vector<SimRequest> run,
                     SteadyStateRequests(requests, multiple, plan.steady_state,
                                         config.profile.shape.vocab_size));
    ASSIGN_OR_RETURN(const SimResult r, Simulate(c, run));
    ++*simulations;
    const PointSummary s = Summarize(r, base_rate * multiple, c.policy.slo);
    points->push_back(s);
    // With SLO classes, each class must reach the target (a configuration may not pass by
    // serving the loose class and giving up the tight one); on a schedule, each phase.
    return s.attainment >= plan.target_attainment &&
           s.worst_class_attainment >= plan.target_attainment &&
           s.worst_phase_attainment >= plan.target_attainment &&
           (!plan.per_quartile || s.worst_quartile_attainment >= plan.target_attainment);
  };
  double lo = 0, hi = 0;  // Highest passing and lowest failing multiple found.
  // The start snaps to a power of two, so that every search brackets the knee between the same
  // powers of two and bisects the same interval whatever it started from (attainment is not
  // quite monotone in the rate near the knee: another interval could settle elsewhere).
  double m = std::exp2(std::round(std::log2(start_multiple > 0 ? start_multiple : 1)));
  ASSIGN_OR_RETURN(bool pass, attained(m));
  if (pass) {
    lo = m;
    for (int i = 0; i < plan.max_doublings && hi == 0; ++i) {
      m *= 2;
      ASSIGN_OR_RETURN(pass, attained(m));
      (pass ? lo : hi) = m;
    }
    if (hi == 0) {  // Passes everywhere searched.
      std::sort(points->begin(), points->end(),
                [](const PointSummary& a, const PointSummary& b) { return a.rate < b.rate; });
      return lo;
    }
  } else {
    hi = m;
    for (int i = 0; i < plan.max_doublings && lo == 0; ++i) {
      m /= 2;
      ASSIGN_OR_RETURN(pass, attained(m));
      (pass ? lo : hi) = m;
    }
    if (lo == 0) return 0.0;  // Fails even at the lowest rate searched.
  }
  for (int i = 0; i < plan.bisect_steps; ++i) {
    m = std::sqrt(lo * hi);
    ASSIGN_OR_RETURN(pass, attained(m));
    (pass ? lo : hi) = m;
  }
  std::sort(points->begin(), points->end(),
            [](const PointSummary& a, const PointSummary& b) { return a.rate < b.rate; });
  return lo;
}

absl::StatusOr<PlanResult> RunPlan(const PlanConfig& plan,
                                   const std::vector<SimRequest>& requests) {
  const absl::Time start = absl::Now();
  PlanResult result;
  result.gpus = plan.gpus;
  result.gpus_per_worker = plan.base.profile.shape.gpus_per_worker;
  result.per_quartile = plan.per_quartile;
  result.trace_rate = OfferedRate(requests);
  result.requests = static_cast<int>(requests.size());
  const int workers = plan.gpus / result.gpus_per_worker;
  if (workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpus: ", plan.gpus, " is fewer than one worker's ", result.gpus_per_worker));
  }
  if (result.trace_rate <= 0)
    return absl::InvalidArgumentError("the trace window needs requests at two distinct times");
  if (plan.timeline) {
    if (plan.steady_state.enabled()) {
      return absl::InvalidArgumentError(
          "--schedule: a schedule is judged as it runs (its phases are its timeline): "
          "--measure_s must be 0");
    }
  } else if (!plan.steady_state.enabled()) {
    return absl::InvalidArgumentError(
        "--measure_s: must be > 0 for plan (a window replayed once is a burst, not a steady "
        "state)");
  }
  RETURN_IF_ERROR(plan.steady_state.Validate());
  result.steady_state = plan.steady_state;
  result.bound = ComputeWorkBound(requests, plan.base.profile, plan.base.policy.slo.tpot_ms);
  // One search per policy and threshold over the splits: always_local on every worker, the
  // others with at least one prefill and one decode worker.
  // always_local runs on decode workers only and always_offload needs a prefill worker; the
  // policies that choose (cost_model, length_threshold) are also searched without any, where
  // they prefill everything locally: a deployment running them may have no prefill worker,
  // and a decode-heavy workload is best served that way (short prompts with 1,000-token
  // outputs: 0P:8D sustains 14.85 requests/s per GPU, 1P:7D 13.62).
  std::vector<Chain> chains;
  for (const std::string& policy : plan.policies) {
    const bool local = policy == "always_local";
    const bool needs_prefill = policy == "always_offload";
    if (!local && workers < 2) continue;
    const std::vector<int> thresholds =
        policy == "length_threshold" ? plan.thresholds : std::vector<int>{0};
    for (int n : thresholds) {
      Chain chain;
      chain.proto.policy = policy;
      chain.proto.threshold = n;
      chain.min_prefill = needs_prefill ? 1 : 0;
      chain.max_prefill = local ? 0 : workers - 1;
      chains.push_back(std::move(chain));
    }
  }
  ProgressBar bar(0, plan.progress);
  {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < chains.size(); i = next++)
        SearchSplits(plan, requests, workers, result.trace_rate, bar, chains[i]);
    };
    std::vector<std::thread> threads;
    for (int j = 1; j < std::min<int>(plan.jobs, static_cast<int>(chains.size())); ++j)
      threads.emplace_back(work);
    work();
    for (std::thread& t : threads) t.join();
  }
  for (Chain& chain : chains) {
    RETURN_IF_ERROR(chain.status);
    std::sort(chain.searched.begin(), chain.searched.end(),
              [](const PlanCandidate& a, const PlanCandidate& b) {
                return a.prefill_workers < b.prefill_workers;
              });
    result.simulations += chain.simulations;
    for (PlanCandidate& c : chain.searched) result.candidates.push_back(std::move(c));
  }
  double best_fixed = 0, cost_model = 0;
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    const PlanCandidate& c = result.candidates[i];
    auto it = result.best_of_policy.find(c.policy);
    if (it == result.best_of_policy.end() || c.goodput > result.candidates[it->second].goodput)
      result.best_of_policy[c.policy] = static_cast<int>(i);
    (IsFixed(c.policy) ? best_fixed : cost_model) =
        std::max(IsFixed(c.policy) ? best_fixed : cost_model, c.goodput);
  }
  if (best_fixed > 0 && cost_model > 0) result.cost_model_over_best_fixed = cost_model / best_fixed;
  if (best_fixed > 0) result.bound_over_best_fixed = result.bound.per_gpu * plan.gpus / best_fixed;
  result.trace_name = plan.trace_name;
  result.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  if (!plan.out_dir.empty()) {
    RETURN_IF_ERROR(measure::WriteSummary(plan.out_dir, ToJson(result)));
    if (absl::Status s = Plot(plan, result); !s.ok()) {
      std::fprintf(stderr, "pdserve-sim: no plot (%s); the data is in %s/plan.dat\n",
                   std::string(s.message()).c_str(), plan.out_dir.c_str());
    }
  }
  return result;
}

std::string FormatPlan(const PlanResult& r) {
  Table table({"policy", "best split", "goodput/s", "per GPU", "vs best fixed", "of work bound"});
  double best_fixed = 0;
  for (const auto& [policy, i] : r.best_of_policy) {
    if (IsFixed(policy)) best_fixed = std::max(best_fixed, r.candidates[i].goodput);
  }
  int winner = -1;
  for (const auto& [policy, i] : r.best_of_policy) {
    const PlanCandidate& c = r.candidates[i];
    if (winner < 0 || c.goodput > r.candidates[winner].goodput) winner = i;
    table.AddRow({policy, c.Name(), Fixed(c.goodput, 2), Fixed(c.goodput_per_gpu, 3),
                  best_fixed > 0 ? absl::StrCat(Fixed(c.goodput / best_fixed, 2), "x") : "-",
                  r.bound.per_gpu > 0 ? Fixed(c.goodput_per_gpu / r.bound.per_gpu, 2) : "-"});
  }
  std::string out =
      absl::StrCat(table.ToString(),
                   r.per_quartile ? "goodput: the objectives met in every "
                                    "prompt-length quartile\n"
                                  : "",
                   r.simulations, " simulations of ", r.requests, " requests (trace rate ",
                   Fixed(r.trace_rate, 2), "/s) in ", Fixed(r.wall_s, 1), " s\n");
  absl::StrAppend(&out, "steady state: >= ", Fixed(r.steady_state.warmup_s, 0),
                  " s warm-up, >= ", Fixed(r.steady_state.measure_s, 0),
                  " s measured, >= ", Fixed(r.steady_state.cooldown_s, 0),
                  " s cool-down at every rate (warm-up and cool-down at least one request's "
                  "life at its objectives)\n");
  if (r.bound_over_best_fixed > 0) {
    absl::StrAppend(&out, "the work bound is ", Fixed(r.bound_over_best_fixed, 2),
                    "x the best fixed policy's goodput: no policy can beat it by more\n");
  }
  absl::StrAppend(
      &out, "work bound: ", Fixed(r.bound.per_gpu, 3), " requests/s per GPU (prefill ",
      Fixed(r.bound.prefill_ms, 1), " ms + decode ", Fixed(r.bound.decode_ms, 1),
      " ms of GPU time a request, step fixed costs >= ", Fixed(100 * r.bound.intercept_share, 0),
      " % of decoding time): no configuration sustains more\n");
  if (winner >= 0) {
    const PlanCandidate& w = r.candidates[winner];
    absl::StrAppend(&out, "best: ", w.Name(), " at ", Fixed(w.goodput_per_gpu, 3),
                    " requests/s per GPU\n");
  }
  return out;
}

nlohmann::json ToJson(const PlanResult& r) {
  nlohmann::json candidates = nlohmann::json::array();
  for (const PlanCandidate& c : r.candidates) {
    nlohmann::json points = nlohmann::json::array();
    for (const PointSummary& p : c.points) points.push_back(ToJson(p));
    candidates.push_back({{"policy", c.policy},
                          {"decode_workers", c.decode_workers},
                          {"prefill_workers", c.prefill_workers},
                          {"threshold", c.threshold},
                          {"goodput", c.goodput},
                          {"goodput_per_gpu", c.goodput_per_gpu},
                          {"points", points}});
  }
  nlohmann::json best = nlohmann::json::object();
  for (const auto& [policy, i] : r.best_of_policy) best[policy] = r.candidates[i].Name();
  nlohmann::json out = {
      {"gpus", r.gpus},
      {"gpus_per_worker", r.gpus_per_worker},
      {"goodput_rule", r.per_quartile ? "every_prompt_length_quartile" : "all_requests"},
      {"trace_rate", r.trace_rate},
      {"requests", r.requests},
      {"best", best},
      {"goodput_cost_model_over_best_fixed", r.cost_model_over_best_fixed},
      {"steady_state", ToJson(r.steady_state)},
      {"work_bound",
       {{"per_gpu", r.bound.per_gpu},
        {"prefill_ms", r.bound.prefill_ms},
        {"decode_ms", r.bound.decode_ms},
        {"intercept_share", r.bound.intercept_share}}},
      {"simulations", r.simulations},
      {"wall_s", r.wall_s},
      {"candidates", candidates}};
  out["trace"] = r.trace_name;
  out["work_bound_over_best_fixed"] = r.bound_over_best_fixed;
  // The trace's own key as well (goodput_cost_model_over_best_fixed_azure_llm_2023_conv), so
  // that the summaries of several traces merge.
  const std::string stem = r.trace_name.substr(0, r.trace_name.find('.'));
  if (!stem.empty())
    out["goodput_cost_model_over_best_fixed_" + stem] = r.cost_model_over_best_fixed;
  return out;
}

}  // namespace pdserve::sim
