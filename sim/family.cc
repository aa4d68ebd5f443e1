#include "sim/family.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/text_table.h"
#include "tools/measure/report.h"
#include "tools/measure/subprocess.h"

namespace pdserve::sim {
namespace {

FamilyCellResult CellOf(const std::string& workload, int gpus, const PlanResult& plan) {
  FamilyCellResult c;
  c.workload = workload;
  c.gpus = gpus;
  c.trace_rate = plan.trace_rate;
  c.simulations = plan.simulations;
  for (const auto& [policy, index] : plan.best_of_policy) {
    const PlanCandidate& best = plan.candidates[index];
    if (policy == "cost_model") {
      c.cost_model = best.Name();
      c.cost_model_per_gpu = best.goodput_per_gpu;
    } else if (best.goodput_per_gpu > c.best_fixed_per_gpu || c.best_fixed.empty()) {
      c.best_fixed = best.Name();
      c.best_fixed_per_gpu = best.goodput_per_gpu;
    }
  }
  c.cost_model_over_best_fixed = plan.cost_model_over_best_fixed;
  c.bound_per_gpu = plan.bound.per_gpu;
  c.bound_over_best_fixed = plan.bound_over_best_fixed;
  return c;
}

absl::Status WriteCsvAndPlot(const std::string& dir, const FamilyResult& r) {
  {
    std::ofstream csv(dir + "/family.csv");
    csv << "index,workload,gpus,cost_model_over_best_fixed,bound_over_best_fixed,best_fixed,"
           "best_fixed_per_gpu,cost_model,cost_model_per_gpu,bound_per_gpu\n";
    for (size_t i = 0; i < r.cells.size(); ++i) {
      const FamilyCellResult& c = r.cells[i];
      csv << i << ',' << c.workload << ',' << c.gpus << ',' << c.cost_model_over_best_fixed << ','
          << c.bound_over_best_fixed << ',' << c.best_fixed << ',' << c.best_fixed_per_gpu << ','
          << c.cost_model << ',' << c.cost_model_per_gpu << ',' << c.bound_per_gpu << '\n';
    }
    if (!csv) return absl::InternalError(absl::StrCat("cannot write ", dir, "/family.csv"));
  }
  // One bar per cell: cost_model over the best fixed policy, the work bound's ratio above it,
  // and the 0.95 line the robustness target asks every bar to clear.
  const std::string script = absl::StrCat(
      "set terminal pngcairo size 1400,520 noenhanced\nset output '", dir, "/family.png'\n",
      "set datafile separator ','\nset title 'cost_model goodput over the best fixed policy, "
      "each at its best split and threshold'\nset style fill solid 0.6\nset boxwidth 0.4\n",
      "set grid ytics\nset yrange [0:*]\nset xtics rotate by 60 right font ',8'\n",
      "set ylabel 'goodput ratio'\nset key top left\n", "plot '", dir,
      "/family.csv' every ::1 using 1:4:xtic(stringcolumn(2).' '."
      "stringcolumn(3).'g') with boxes title 'cost_model / best fixed', ",
      "'' every ::1 using 1:5 with points pt 7 title 'work bound / best fixed', ",
      "0.95 with lines dt 2 title '0.95'\n");
  {
    std::ofstream out(dir + "/family.gnuplot");
    out << script;
  }
  auto run = measure::RunCommand({"gnuplot", dir + "/family.gnuplot"}, {}, absl::Seconds(60));
  return run.ok() ? absl::OkStatus() : run.status();
}

}  // namespace

absl::StatusOr<FamilyResult> RunFamily(const FamilyConfig& config) {
  const auto& policies = config.plan.policies;
  if (std::find(policies.begin(), policies.end(), "cost_model") == policies.end() ||
      policies.size() < 2) {
    return absl::InvalidArgumentError(
        "--policies: the family compares cost_model with the fixed policies: name both");
  }
  if (config.workloads.empty()) return absl::InvalidArgumentError("the family has no workload");
  const absl::Time start = absl::Now();
  FamilyResult result;
  for (int gpus : config.gpus) {
    for (const FamilyWorkload& w : config.workloads) {
      PlanConfig plan = config.plan;
      plan.gpus = gpus;
      plan.trace_name = w.name;
      plan.out_dir.clear();
      if (!config.out_dir.empty()) {
        plan.out_dir = absl::StrCat(config.out_dir, "/cells/",
                                    absl::StrReplaceAll(w.name, {{"/", "_"}}), "_", gpus, "gpu");
        std::filesystem::create_directories(plan.out_dir);
      }
      std::fprintf(stderr, "family: %s at %d GPUs\n", w.name.c_str(), gpus);
      ASSIGN_OR_RETURN(const PlanResult planned, RunPlan(plan, w.requests));
      result.cells.push_back(CellOf(w.name, gpus, planned));
      const FamilyCellResult& c = result.cells.back();
      if (result.worst_cell.empty() || c.cost_model_over_best_fixed < result.worst_ratio) {
        result.worst_ratio = c.cost_model_over_best_fixed;
        result.worst_cell = absl::StrCat(c.workload, " at ", gpus, " GPUs");
      }
    }
  }
  result.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  if (!config.out_dir.empty()) {
    RETURN_IF_ERROR(measure::WriteSummary(config.out_dir, ToJson(result)));
    if (absl::Status s = WriteCsvAndPlot(config.out_dir, result); !s.ok()) {
      std::fprintf(stderr, "family: no plot (%s)\n", std::string(s.message()).c_str());
    }
  }
  return result;
}

std::string FormatFamily(const FamilyResult& r) {
  Table table({"workload", "GPUs", "best fixed", "per GPU", "cost_model", "per GPU",
               "cost_model / fixed", "bound / fixed"});
  for (const FamilyCellResult& c : r.cells) {
    table.AddRow({c.workload, absl::StrCat(c.gpus), c.best_fixed, Fixed(c.best_fixed_per_gpu, 3),
                  c.cost_model, Fixed(c.cost_model_per_gpu, 3),
                  absl::StrCat(Fixed(c.cost_model_over_best_fixed, 3), "x"),
                  absl::StrCat(Fixed(c.bound_over_best_fixed, 2), "x")});
  }
  return absl::StrCat(table.ToString(), "worst cell: ", r.worst_cell, " at ",
                      Fixed(r.worst_ratio, 3), "x the best fixed policy; ", r.cells.size(),
                      " plans in ", Fixed(r.wall_s, 1), " s\n");
}

nlohmann::json ToJson(const FamilyResult& r) {
  nlohmann::json cells = nlohmann::json::array();
  for (const FamilyCellResult& c : r.cells) {
    cells.push_back({{"workload", c.workload},
                     {"gpus", c.gpus},
                     {"trace_rate", c.trace_rate},
                     {"best_fixed", c.best_fixed},
                     {"best_fixed_per_gpu", c.best_fixed_per_gpu},
                     {"cost_model", c.cost_model},
                     {"cost_model_per_gpu", c.cost_model_per_gpu},
                     {"cost_model_over_best_fixed", c.cost_model_over_best_fixed},
                     {"bound_per_gpu", c.bound_per_gpu},
                     {"bound_over_best_fixed", c.bound_over_best_fixed},
                     {"simulations", c.simulations}});
  }
  return {{"cells", cells},
          {"family_worst_cost_model_over_best_fixed", r.worst_ratio},
          {"family_worst_cell", r.worst_cell},
          {"wall_s", r.wall_s}};
}

}  // namespace pdserve::sim
