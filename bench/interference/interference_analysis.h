// Analysis of the interference microbenchmark (seed 002): per-configuration aggregates over
// repetitions, the step-time fit that becomes the router's cost_model.json (with R^2 of the
// predicted total interference on held-out configurations), the CSV table and the plots.
// Thread-safety: pure functions.
#ifndef PDSERVE_BENCH_INTERFERENCE_INTERFERENCE_ANALYSIS_H_
#define PDSERVE_BENCH_INTERFERENCE_INTERFERENCE_ANALYSIS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace pdserve::bench {

// One injected prefill next to D running decodes (one repetition).
struct InterferenceRun {
  int chunk = 0;           // The decode worker's step token budget.
  int decode = 0;          // D.
  int prefill_tokens = 0;  // P.
  int repetition = 0;
  double decode_context = 0;        // Mean KV positions per running decode in the window.
  double tpot_baseline_p50_ms = 0;  // Decode-only steps (D > 0).
  double tpot_baseline_p90_ms = 0;
  double tpot_baseline_p99_ms = 0;
  double tpot_during_p50_ms = 0;  // While the prefill's chunks run.
  double tpot_during_p90_ms = 0;
  double tpot_during_mean_ms = 0;  // Mean step time while the chunks run.
  double window_delay_ms = 0;      // Sum over streams of their gaps beyond the baseline.
  double tpot_after_p50_ms = 0;    // Recovery.
  double prefill_duration_ms = 0;  // Injection until its first token.
  int chunks_actual = 0;           // From the worker's step counters.
  int chunks_expected = 0;         // ceil(P / (chunk - D)).
  int mixed_steps = 0;

  nlohmann::json ToJson() const;
  static absl::StatusOr<InterferenceRun> FromJson(const nlohmann::json& j);
  // TPOT penalty (mean during the window over the baseline median) and the total delay over
  // all running streams, as measured in the window (the seed's derived values; its
  // num_chunks x D x penalty estimate of the total is what the window measures directly).
  double penalty_ms() const { return tpot_during_mean_ms - tpot_baseline_p50_ms; }
  double total_interference_ms() const { return window_delay_ms; }
};

// Repetitions of one (chunk, D, P) configuration.
struct InterferenceConfigResult {
  int chunk = 0;
  int decode = 0;
  int prefill_tokens = 0;
  int repetitions = 0;
  double tpot_baseline_ms = 0;  // Mean over repetitions of the p50s.
  double tpot_during_ms = 0;    // Mean over repetitions of the window means.
  double tpot_after_ms = 0;
  double penalty_ms = 0;
  double penalty_ratio = 0;  // during / baseline.
  double total_interference_ms = 0;
  double prefill_duration_ms = 0;
  double chunks_actual = 0;
  int chunks_expected = 0;
  double cv = 0;  // Of tpot_during (D > 0) or of the prefill duration (D = 0).
  double decode_context = 0;
};
// The repetition to measure again: the first whose chunk count is not the expected one (it
// did not run the protocol), else the one whose decode-only baseline TPOT is furthest from
// the median of the configuration's repetitions if that is more than `max_drift` (relative:
// it ran on a disturbed machine). -1 if none (a baseline needs 3 repetitions and D > 0).
int DisturbedRepetition(const std::vector<InterferenceRun>& runs, double max_drift);

std::vector<InterferenceConfigResult> Aggregate(const std::vector<InterferenceRun>& runs);

// The linear step model the router uses (router/cost_model.h):
//   step_ms = intercept + per_decode * D + per_prefill_token * P
//             + per_attention * A_decode + per_prefill_attention * A_prefill.
// The decode attention's coefficient is only told apart from per_decode when the decodes'
// contexts vary across the grid; otherwise the two share the work and predictions at the
// measured context stay right.
struct StepFit {
  double intercept_ms = 0;
  double per_decode_ms = 0;
  double per_prefill_token_ms = 0;
  double per_attention_ms = 0;
  double per_prefill_attention_ms = 0;
  int train_configs = 0;
  int heldout_configs = 0;
  double r2_train = 0;  // Of the predicted total interference.
  double r2_heldout = 0;
  // Total delay a P-token prefill after `cached` tokens causes D running streams.
  double TotalInterference(double decode, double prefill_tokens) const;
};
// Fits on every configuration but each `holdout_every`-th (D > 0 ones), which are held out
// for R^2. FAILED_PRECONDITION with too few configurations.
absl::StatusOr<StepFit> FitStepModel(const std::vector<InterferenceConfigResult>& configs,
                                     int holdout_every = 4);

// cost_model.json for the router, from the fit; `defaults` supplies what the benchmark does
// not measure (transfer), `calibration` is recorded as is.
nlohmann::json CostModelJson(const StepFit& fit, const nlohmann::json& calibration);

std::string InterferenceCsv(const std::vector<InterferenceConfigResult>& configs);

// Writes heatmap.png (penalty ratio over D x P at the largest chunk) and breakeven.png
// (total interference against the offload's transfer cost) with gnuplot, beside their data
// and scripts. UNAVAILABLE when gnuplot is missing (the data files are still written).
absl::Status WritePlots(const std::vector<InterferenceConfigResult>& configs,
                        double transfer_cost_ms, const std::string& dir);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_INTERFERENCE_INTERFERENCE_ANALYSIS_H_
