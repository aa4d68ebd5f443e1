// pdserve-sim validate: the simulator against real runs. It reads what `pdserve-bench serve`
// measured (its output directory: each rate point of each mix, or of its trace, and policy,
// with the seed of the run that stands for it, and the objectives it held requests to),
// regenerates the very same requests with the serve bench's own generator (a trace selected
// as the serve bench recorded), simulates the cluster the serve bench ran (its worker counts;
// the workers' default flags, or for an emulated run the profile's cluster shape) with the
// calibration the interference bench wrote for the same model or, for an emulated run, the
// very profile its workers waited out, and compares TTFT and TPOT p50/p90 and SLO attainment
// point by point.
// Thread-safety: pure functions.
#ifndef PDSERVE_SIM_VALIDATE_H_
#define PDSERVE_SIM_VALIDATE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sim/sim_profile.h"

namespace pdserve::sim {

struct ValidateConfig {
  std::string serve_dir;  // `pdserve-bench serve --out`.
  std::string model_dir;  // The model it served; empty: the one its summary names.
  // Timing from the interference bench's cost_model.json for that model; the worker shape
  // comes from the model and the workers' defaults, not from the profile. An emulated run's
  // own profile (named in its summary) replaces it, shape included.
  SimProfile profile;
  uint64_t serve_seed = 2026;   // The serve bench's --seed (for points that do not record it).
  int length_threshold = 1024;  // The serve bench's --length_threshold.
  // One RPC hop, ms; negative: calibrated from the serve bench's unloaded pass (below).
  double rpc_ms = -1;
  // Host time per decode step (SimConfig::host_ms_per_step), ms; negative: calibrated from the
  // unloaded pass's TPOT (below).
  double host_ms = -1;
  double report_interval_ms = 100;
  double target_attainment = 0.9;
};

struct MetricPair {
  double measured = 0;
  double simulated = 0;
};

struct ValidationRow {
  std::string mix;
  std::string policy;
  double rate = 0;
  uint64_t seed = 0;
  int requests = 0;
  MetricPair ttft_p50, ttft_p90, tpot_p50, tpot_p90, attainment;
  MetricPair offloaded;  // Share of requests.
  // Measured attainment met the target here and at every lower rate of its sweep.
  bool below_knee = false;
};

// A policy's goodput over its sweep (measure::SweepGoodput), from the measured attainments and
// from the simulated ones at the same rates.
struct GoodputPair {
  std::string mix;
  std::string policy;
  MetricPair goodput;
};

struct ValidationResult {
  std::vector<ValidationRow> rows;
  std::vector<GoodputPair> goodputs;
  // The RPC hop used, per mix: given, or calibrated so that the simulated unloaded TTFT of
  // each request kind matches what the serve bench measured one request at a time before
  // its sweep (runs/<mix>/unloaded.json; the median over kinds). That pass is not one of
  // the points validated.
  std::map<std::string, double> rpc_ms;
  // The host time per decode step used, per mix: given, or calibrated so that the simulated
  // unloaded TPOT matches the measured one (one request at a time: a step per token).
  std::map<std::string, double> host_ms;
  int below_knee = 0;
  // Over the rows below the knee: median |simulated / measured - 1| of each latency, median
  // |simulated - measured| of attainment (-1: no row below the knee).
  double error_ttft_p50 = -1, error_ttft_p90 = -1, error_tpot_p50 = -1, error_tpot_p90 = -1;
  double error_attainment = -1;
};

// Reads the serve bench's output and simulates every rate point of every mix and trace replay
// (a trace replay from before the serve bench recorded its selection is skipped).
absl::StatusOr<ValidationResult> Validate(const ValidateConfig& config);

// The worker shape a decode or prefill worker started with default flags has for the model
// in `model_dir` (f32 KV, 16-token blocks, a 512 MiB pool, 512-token steps, 256 sequences,
// 8192-token prefill batches).
absl::StatusOr<WorkerShape> DefaultWorkerShape(const std::string& model_dir);

// Per mix with cost_model and another policy: cost_model's goodput over the best other's,
// measured and simulated.
std::map<std::string, MetricPair> CostModelOverBestFixed(const ValidationResult& result);

std::string FormatValidation(const ValidationResult& result);
nlohmann::json ValidationJson(const ValidationResult& result);

}  // namespace pdserve::sim

#endif  // PDSERVE_SIM_VALIDATE_H_
