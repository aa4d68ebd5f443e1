// pdserve-sim plan: how to split N GPUs into prefill and decode workers, and which placement
// policy to run, for a trace and its objectives (Dynamo's planner question, answered with our
// own decision code). Every configuration (policy x prefill:decode split, and length_threshold
// at each threshold) gets its goodput: the highest rate, as a multiple of the trace's own,
// at which the target fraction of requests meets both objectives at steady state
// (steady_state.h), found by doubling or halving from a start and then bisecting. The result
// ranks the configurations by goodput per GPU, names each policy's best, compares cost_model
// with the best fixed policy, and sets both against what the work alone allows
// (work_bound.h).
// Thread-safety: RunPlan runs PlanConfig::jobs searches at once on threads of its own (each
// simulation is independent: they share only the read-only requests and a locked progress
// bar) and returns when all have ended.
#ifndef PDSERVE_SIM_PLANNER_H_
#define PDSERVE_SIM_PLANNER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sim/sim_summary.h"
#include "sim/simulator.h"
#include "sim/steady_state.h"
#include "sim/work_bound.h"

namespace pdserve::sim {

struct PlanConfig {
  SimConfig base;  // Profile, objectives (policy.slo), wire; workers and policy are searched.
  int gpus = 8;
  std::vector<std::string> policies = {"always_local", "always_offload", "length_threshold",
                                       "cost_model"};
  std::vector<int> thresholds = {256, 512, 1024, 2048, 4096, 8192};
  int bisect_steps = 4;
  double target_attainment = 0.9;
  // Goodput also requires target_attainment in each prompt-length quartile
  // (PointSummary::worst_quartile_attainment), so that no configuration passes by giving up
  // the longest prompts. Off: the usual goodput (DistServe's), over all requests.
  bool per_quartile = false;
  // Rate multipliers searched at most this far from 1 (either way), as powers of two.
  int max_doublings = 10;
  // How each rate is judged: the window repeated until its measured arrivals span
  // steady_state.measure_s, between a warm-up and a cool-down (steady_state.h). The planner
  // needs it enabled: a window replayed once is a burst, and a burst a few TTFT objectives
  // long is absorbed by the objective whatever the policy.
  SteadyState steady_state;
  // The requests are a timeline (a schedule of phases, schedule.h): each rate multiple runs
  // them once, as they are (steady_state must be disabled), goodput needs the target in every
  // phase, and the work bound is the least over the phases (work_bound.h).
  bool timeline = false;
  // Prefill worker counts tried first are every split_step-th (1, 1 + step, ..., and the last);
  // then every split between the neighbours of each (policy, threshold)'s best of those.
  // 1: every split. A 32-GPU plan has 31 splits per policy and threshold: step 4 searches 15
  // of them and finds the best wherever goodput rises then falls over the splits (a local dip
  // can hide a better split: bench/README.md says which step each figure used).
  int split_step = 1;
  // Searches run at once, one per (policy, threshold) at a time. The answer does not depend
  // on it: each (policy, threshold) searches its splits in the same order on one thread.
  int jobs = 1;
  std::string out_dir;     // summary.json, plan.dat, plan.gnuplot, plan.png; empty: none.
  std::string trace_name;  // For the report.
  bool progress = true;    // A progress bar on stderr.
};

struct PlanCandidate {
  std::string policy;
  int decode_workers = 0;
  int prefill_workers = 0;
  int threshold = 0;   // length_threshold's N; 0 for the others.
  double goodput = 0;  // Requests per second meeting the target attainment.
  double goodput_per_gpu = 0;
  std::vector<PointSummary> points;  // Every rate simulated, by rate.
  std::string Name() const;
};

struct PlanResult {
  int gpus = 0;
  int gpus_per_worker = 1;
  bool per_quartile = false;  // PlanConfig::per_quartile: which goodput this is.
  double trace_rate = 0;      // The trace window's own requests per second.
  int requests = 0;
  // Every configuration searched, by policy (in PlanConfig::policies order), threshold and
  // prefill workers.
  std::vector<PlanCandidate> candidates;
  std::map<std::string, int> best_of_policy;  // Index into candidates.
  // cost_model's best goodput over the best fixed policy's (0 without either).
  double cost_model_over_best_fixed = 0;
  // What the work alone allows any configuration (work_bound.h), over the trace window, and
  // over the best fixed policy's goodput: the most any policy could reach (0 without one).
  WorkBound bound;
  double bound_over_best_fixed = 0;
  std::string trace_name;  // PlanConfig::trace_name.
  SteadyState steady_state;
  int simulations = 0;
  double wall_s = 0;
};

// The goodput search of one configuration (exposed for tests): `config` at rate multiples of
// the requests' own, each judged at plan.steady_state; returns the goodput in multiples and
// fills `points`.
absl::StatusOr<double> SearchGoodput(const SimConfig& config,
                                     const std::vector<SimRequest>& requests, double start_multiple,
                                     const PlanConfig& plan, std::vector<PointSummary>* points,
                                     int* simulations);

absl::StatusOr<PlanResult> RunPlan(const PlanConfig& plan, const std::vector<SimRequest>& requests);
std::string FormatPlan(const PlanResult& result);
nlohmann::json ToJson(const PlanResult& result);

}  // namespace pdserve::sim

#endif  // PDSERVE_SIM_PLANNER_H_
