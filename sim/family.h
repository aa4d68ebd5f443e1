// pdserve-sim family: the placement policies judged on every cell of the synthetic workload
// family (workload_family.h), and on traces, by the planner (planner.h): for each cell and
// GPU count, cost_model's best goodput over the best fixed policy's (each at its own best
// prefill:decode split, and length_threshold at its best threshold), with what the work alone
// allows beside it. The robustness claim is the worst cell's ratio.
// Thread-safety: RunFamily plans one cell at a time (each plan on FamilyConfig::plan.jobs
// threads).
#ifndef PDSERVE_SIM_FAMILY_H_
#define PDSERVE_SIM_FAMILY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sim/planner.h"
#include "sim/workload_family.h"

namespace pdserve::sim {

// One workload to plan: a family cell's requests, or a trace window's.
struct FamilyWorkload {
  std::string name;  // The cell's name, or the trace's file name.
  std::vector<SimRequest> requests;
};

struct FamilyConfig {
  // Everything but the GPU count and the workload's name (the policies must include
  // cost_model and at least one fixed policy).
  PlanConfig plan;
  std::vector<int> gpus = {8};
  std::vector<FamilyWorkload> workloads;
  std::string out_dir;  // summary.json, family.csv, family.png; empty: none.
};

struct FamilyCellResult {
  std::string workload;
  int gpus = 0;
  double trace_rate = 0;
  std::string best_fixed;  // The best fixed configuration's name.
  double best_fixed_per_gpu = 0;
  std::string cost_model;  // cost_model's best configuration's name.
  double cost_model_per_gpu = 0;
  double cost_model_over_best_fixed = 0;
  double bound_per_gpu = 0;
  double bound_over_best_fixed = 0;
  int simulations = 0;
};

struct FamilyResult {
  std::vector<FamilyCellResult> cells;
  // The lowest cost_model_over_best_fixed over the cells, and where.
  double worst_ratio = 0;
  std::string worst_cell;
  double wall_s = 0;
};

absl::StatusOr<FamilyResult> RunFamily(const FamilyConfig& config);
std::string FormatFamily(const FamilyResult& result);
nlohmann::json ToJson(const FamilyResult& result);

}  // namespace pdserve::sim

#endif  // PDSERVE_SIM_FAMILY_H_
