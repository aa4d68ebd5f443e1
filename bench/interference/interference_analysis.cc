#include "bench/interference/interference_analysis.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/measure/report.h"
#include "tools/measure/subprocess.h"

namespace pdserve::bench {

using measure::CoefficientOfVariation;
using measure::Mean;
using measure::Median;
using measure::RunCommand;
namespace {

// The step model's features (router/cost_model.h): [1, D, P, A_decode, A_prefill].
constexpr int kFeatures = 5;

// One observed step for the least-squares fit: its features and its time.
struct Observation {
  std::array<double, kFeatures> x;
  double y;
};

double Attention(double tokens) { return tokens * (tokens + 1) / 2; }

std::vector<Observation> Observations(const std::vector<InterferenceConfigResult>& configs) {
  std::vector<Observation> obs;
  for (const InterferenceConfigResult& c : configs) {
    const double chunks = std::max(1.0, c.chunks_actual);
    const double p = c.prefill_tokens / chunks;
    const double a_prefill = Attention(c.prefill_tokens) / chunks;
    const double a_decode = c.decode * c.decode_context;
    if (c.decode > 0) {
      obs.push_back({{1, double(c.decode), 0, a_decode, 0}, c.tpot_baseline_ms});
      obs.push_back({{1, double(c.decode), p, a_decode, a_prefill}, c.tpot_during_ms});
    } else {
      obs.push_back({{1, 0, p, 0, a_prefill}, c.prefill_duration_ms / chunks});
    }
  }
  return obs;
}

// Least squares over the features not in `fixed_zero`, by the normal equations.
std::array<double, kFeatures> Solve(const std::vector<Observation>& obs,
                                    const std::array<bool, kFeatures>& fixed_zero) {
  constexpr int n = kFeatures;
  // Scale features to O(1) for conditioning.
  std::array<double, n> scale;
  scale.fill(1);
  for (const Observation& o : obs) {
    for (int i = 0; i < n; ++i) scale[i] = std::max(scale[i], std::abs(o.x[i]));
  }
  double m[n][n + 1] = {};
  for (const Observation& o : obs) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) m[i][j] += o.x[i] / scale[i] * o.x[j] / scale[j];
      m[i][n] += o.x[i] / scale[i] * o.y;
    }
  }
  for (int i = 0; i < n; ++i) {
    if (!fixed_zero[i]) continue;
    for (int j = 0; j <= n; ++j) m[i][j] = 0;
    for (int j = 0; j < n; ++j) m[j][i] = 0;
    m[i][i] = 1;
  }
  for (int i = 0; i < n; ++i) m[i][i] += 1e-9;  // Ridge: keeps a degenerate grid solvable.
  for (int col = 0; col < n; ++col) {
    int pivot = col;
    for (int r = col + 1; r < n; ++r) {
      if (std::abs(m[r][col]) > std::abs(m[pivot][col])) pivot = r;
    }
    for (int j = 0; j <= n; ++j) std::swap(m[col][j], m[pivot][j]);
    for (int r = 0; r < n; ++r) {
      if (r == col || m[col][col] == 0) continue;
      const double f = m[r][col] / m[col][col];
      for (int j = col; j <= n; ++j) m[r][j] -= f * m[col][j];
    }
  }
  std::array<double, n> theta{};
  for (int i = 0; i < n; ++i) theta[i] = m[i][i] == 0 ? 0 : m[i][n] / m[i][i] / scale[i];
  return theta;
}

// Non-negative least squares by elimination: a coefficient that fits negative is fixed at 0.
std::array<double, kFeatures> NonNegativeSolve(const std::vector<Observation>& obs,
                                               std::array<bool, kFeatures> zero) {
  std::array<double, kFeatures> theta = Solve(obs, zero);
  for (int round = 0; round < kFeatures; ++round) {
    bool changed = false;
    for (int i = 0; i < kFeatures; ++i) {
      if (theta[i] < 0 && !zero[i]) {
        zero[i] = true;
        changed = true;
      }
    }
    if (!changed) break;
    theta = Solve(obs, zero);
  }
  for (int i = 0; i < kFeatures; ++i) {
    if (zero[i]) theta[i] = 0;
  }
  return theta;
}

double RSquared(const std::vector<double>& measured, const std::vector<double>& predicted) {
  if (measured.size() < 2) return 0;
  const double mean = Mean(measured);
  double ss_res = 0;
  double ss_tot = 0;
  for (size_t i = 0; i < measured.size(); ++i) {
    ss_res += (measured[i] - predicted[i]) * (measured[i] - predicted[i]);
    ss_tot += (measured[i] - mean) * (measured[i] - mean);
  }
  return ss_tot == 0 ? 0 : 1 - ss_res / ss_tot;
}

}  // namespace

nlohmann::json InterferenceRun::ToJson() const {
  return {{"config",
           {{"decode_batch_size", decode},
            {"new_prefill_tokens", prefill_tokens},
            {"chunk_size", chunk},
            {"repetition", repetition}}},
          {"baseline",
           {{"tpot_p50_ms", tpot_baseline_p50_ms},
            {"tpot_p90_ms", tpot_baseline_p90_ms},
            {"tpot_p99_ms", tpot_baseline_p99_ms},
            {"step_time_ms", tpot_baseline_p50_ms},
            {"decode_context_tokens", decode_context}}},
          {"interference",
           {{"tpot_during_prefill_p50_ms", tpot_during_p50_ms},
            {"tpot_during_prefill_p90_ms", tpot_during_p90_ms},
            {"tpot_during_prefill_mean_ms", tpot_during_mean_ms},
            {"window_delay_ms", window_delay_ms},
            {"tpot_after_prefill_p50_ms", tpot_after_p50_ms},
            {"num_chunks_actual", chunks_actual},
            {"num_chunks_expected", chunks_expected},
            {"mixed_steps", mixed_steps},
            {"prefill_duration_ms", prefill_duration_ms},
            {"prefill_ttft_ms", prefill_duration_ms}}},
          {"derived",
           {{"tpot_penalty_p50_ms", penalty_ms()},
            {"tpot_penalty_ratio",
             tpot_baseline_p50_ms > 0 ? tpot_during_p50_ms / tpot_baseline_p50_ms : 0},
            {"total_interference_ms", total_interference_ms()},
            {"decode_tokens_delayed", decode * chunks_actual}}}};
}

absl::StatusOr<InterferenceRun> InterferenceRun::FromJson(const nlohmann::json& j) {
  try {
    InterferenceRun r;
    r.decode = j.at("config").at("decode_batch_size").get<int>();
    r.prefill_tokens = j.at("config").at("new_prefill_tokens").get<int>();
    r.chunk = j.at("config").at("chunk_size").get<int>();
    r.repetition = j.at("config").at("repetition").get<int>();
    r.tpot_baseline_p50_ms = j.at("baseline").at("tpot_p50_ms").get<double>();
    r.tpot_baseline_p90_ms = j.at("baseline").at("tpot_p90_ms").get<double>();
    r.tpot_baseline_p99_ms = j.at("baseline").at("tpot_p99_ms").get<double>();
    r.decode_context = j.at("baseline").at("decode_context_tokens").get<double>();
    const auto& i = j.at("interference");
    r.tpot_during_p50_ms = i.at("tpot_during_prefill_p50_ms").get<double>();
    r.tpot_during_p90_ms = i.at("tpot_during_prefill_p90_ms").get<double>();
    r.tpot_during_mean_ms = i.at("tpot_during_prefill_mean_ms").get<double>();
    r.window_delay_ms = i.at("window_delay_ms").get<double>();
    r.tpot_after_p50_ms = i.at("tpot_after_prefill_p50_ms").get<double>();
    r.chunks_actual = i.at("num_chunks_actual").get<int>();
    r.chunks_expected = i.at("num_chunks_expected").get<int>();
    r.mixed_steps = i.at("mixed_steps").get<int>();
    r.prefill_duration_ms = i.at("prefill_duration_ms").get<double>();
    return r;
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("not an interference run record: ", e.what()));
  }
}

int DisturbedRepetition(const std::vector<InterferenceRun>& runs, double max_drift) {
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].chunks_actual != runs[i].chunks_expected) return static_cast<int>(i);
  }
  std::vector<double> baselines;
  for (const InterferenceRun& r : runs) baselines.push_back(r.tpot_baseline_p50_ms);
  if (baselines.size() < 3) return -1;
  const double median = Median(baselines);
  if (median <= 0) return -1;
  int worst = -1;
  double worst_drift = max_drift;
  for (size_t i = 0; i < baselines.size(); ++i) {
    const double drift = std::abs(baselines[i] - median) / median;
    if (drift > worst_drift) {
      worst_drift = drift;
      worst = static_cast<int>(i);
    }
  }
  return worst;
}

std::vector<InterferenceConfigResult> Aggregate(const std::vector<InterferenceRun>& runs) {
  std::map<std::tuple<int, int, int>, std::vector<const InterferenceRun*>> by_config;
  for (const InterferenceRun& r : runs)
    by_config[{r.chunk, r.decode, r.prefill_tokens}].push_back(&r);
  std::vector<InterferenceConfigResult> out;
  for (const auto& [key, reps] : by_config) {
    InterferenceConfigResult c;
    std::tie(c.chunk, c.decode, c.prefill_tokens) = key;
    c.repetitions = static_cast<int>(reps.size());
    std::vector<double> during;
    std::vector<double> duration;
    for (const InterferenceRun* r : reps) {
      c.tpot_baseline_ms += r->tpot_baseline_p50_ms / reps.size();
      c.tpot_during_ms += r->tpot_during_mean_ms / reps.size();
      c.tpot_after_ms += r->tpot_after_p50_ms / reps.size();
      c.total_interference_ms += r->total_interference_ms() / reps.size();
      c.prefill_duration_ms += r->prefill_duration_ms / reps.size();
      c.chunks_actual += static_cast<double>(r->chunks_actual) / reps.size();
      c.decode_context += r->decode_context / reps.size();
      c.chunks_expected = r->chunks_expected;
      during.push_back(r->tpot_during_mean_ms);
      duration.push_back(r->prefill_duration_ms);
    }
    c.penalty_ms = c.tpot_during_ms - c.tpot_baseline_ms;
    c.penalty_ratio = c.tpot_baseline_ms > 0 ? c.tpot_during_ms / c.tpot_baseline_ms : 0;
    c.cv = CoefficientOfVariation(c.decode > 0 ? during : duration);
    out.push_back(c);
  }
  return out;
}

double StepFit::TotalInterference(double decode, double prefill_tokens) const {
  return decode * (per_prefill_token_ms * prefill_tokens +
                   per_prefill_attention_ms * Attention(prefill_tokens));
}

absl::StatusOr<StepFit> FitStepModel(const std::vector<InterferenceConfigResult>& configs,
                                     int holdout_every) {
  std::vector<InterferenceConfigResult> train;
  std::vector<InterferenceConfigResult> heldout;
  int interfering = 0;
  for (const InterferenceConfigResult& c : configs) {
    if (c.decode > 0 && holdout_every > 1 && ++interfering % holdout_every == 0) {
      heldout.push_back(c);
    } else {
      train.push_back(c);
    }
  }
  std::vector<Observation> obs = Observations(train);
  if (obs.size() < static_cast<size_t>(kFeatures)) {
    return absl::FailedPreconditionError(absl::StrCat("the fit needs at least ", kFeatures,
                                                      " observations, the grid gave ", obs.size()));
  }
  // Two stages when the grid has decode-only steps. A decode-only step of a fraction of a
  // millisecond sets every stream's TPOT; fitted together with prefill chunks of tens of
  // milliseconds its residual counts for nothing (on the tiny model the joint fit's intercept
  // came out at 6x the measured decode step). So the decode terms (intercept, per decode,
  // decode attention) are fitted on the decode-only steps, then the prefill terms on what the
  // mixed steps and prefill chunks take beyond them.
  std::vector<Observation> decode_only;
  for (const Observation& o : obs)
    if (o.x[2] == 0 && o.x[4] == 0) decode_only.push_back(o);
  std::array<double, kFeatures> theta{};
  if (decode_only.size() >= 3) {
    const std::array<double, kFeatures> decode =
        NonNegativeSolve(decode_only, {false, false, true, false, true});
    std::vector<Observation> prefill;
    for (Observation o : obs) {
      if (o.x[2] == 0 && o.x[4] == 0) continue;
      o.y -= decode[0] * o.x[0] + decode[1] * o.x[1] + decode[3] * o.x[3];
      prefill.push_back(o);
    }
    const std::array<double, kFeatures> chunk =
        NonNegativeSolve(prefill, {true, true, false, true, false});
    theta = {decode[0], decode[1], chunk[2], decode[3], chunk[4]};
  } else {
    theta = NonNegativeSolve(obs, {});
  }
  StepFit fit;
  fit.intercept_ms = std::max(0.0, theta[0]);
  fit.per_decode_ms = std::max(0.0, theta[1]);
  fit.per_prefill_token_ms = std::max(0.0, theta[2]);
  fit.per_attention_ms = std::max(0.0, theta[3]);
  fit.per_prefill_attention_ms = std::max(0.0, theta[4]);
  auto r2 = [&](const std::vector<InterferenceConfigResult>& set) {
    std::vector<double> measured;
    std::vector<double> predicted;
    for (const InterferenceConfigResult& c : set) {
      if (c.decode == 0) continue;
      measured.push_back(c.total_interference_ms);
      predicted.push_back(fit.TotalInterference(c.decode, c.prefill_tokens));
    }
    return RSquared(measured, predicted);
  };
  fit.train_configs = static_cast<int>(train.size());
  fit.heldout_configs = static_cast<int>(heldout.size());
  fit.r2_train = r2(train);
  fit.r2_heldout = heldout.size() >= 2 ? r2(heldout) : fit.r2_train;
  return fit;
}

nlohmann::json CostModelJson(const StepFit& fit, const nlohmann::json& calibration) {
  nlohmann::json j;
  j["description"] =
      "Written by pdserve-bench interference; see deploy/cost_model.json for the meaning of every "
      "key.";
  j["calibration"] = calibration;
  j["calibration"]["r2_train"] = fit.r2_train;
  j["calibration"]["r2_heldout"] = fit.r2_heldout;
  j["step"] = {{"intercept_ms", fit.intercept_ms},
               {"per_decode_ms", fit.per_decode_ms},
               {"per_prefill_token_ms", fit.per_prefill_token_ms},
               {"per_attention_ms", fit.per_attention_ms},
               {"per_prefill_attention_ms", fit.per_prefill_attention_ms}};
  // A prefill worker runs the same model: the prompt as one step of the fitted model.
  j["prefill"] = {{"overhead_ms", fit.intercept_ms},
                  {"per_token_ms", fit.per_prefill_token_ms},
                  {"per_token_squared_ms", fit.per_prefill_attention_ms / 2}};
  j["transfer"] = {{"latency_ms", 0.3}, {"bytes_per_ms", 3e6}};
  j["offload_overhead_ms"] = 2.0;
  j["online"] = {{"forgetting", 0.995}, {"prior_variance", 100.0}};
  return j;
}

std::string InterferenceCsv(const std::vector<InterferenceConfigResult>& configs) {
  std::string csv =
      "chunk_size,decode_batch_size,new_prefill_tokens,tpot_baseline_ms,tpot_interference_ms,tpot_"
      "after_ms,"
      "tpot_penalty_ms,penalty_ratio,num_chunks,num_chunks_expected,prefill_duration_ms,total_"
      "interference_ms,cv,"
      "repetitions\n";
  for (const InterferenceConfigResult& c : configs) {
    absl::StrAppendFormat(&csv, "%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.2f,%d,%.2f,%.2f,%.4f,%d\n",
                          c.chunk, c.decode, c.prefill_tokens, c.tpot_baseline_ms, c.tpot_during_ms,
                          c.tpot_after_ms, c.penalty_ms, c.penalty_ratio, c.chunks_actual,
                          c.chunks_expected, c.prefill_duration_ms, c.total_interference_ms, c.cv,
                          c.repetitions);
  }
  return csv;
}

absl::Status WritePlots(const std::vector<InterferenceConfigResult>& configs,
                        double transfer_cost_ms, const std::string& dir) {
  if (configs.empty()) return absl::OkStatus();
  int chunk = 0;
  std::set<int> ds;
  std::set<int> ps;
  for (const auto& c : configs) chunk = std::max(chunk, c.chunk);
  std::map<std::pair<int, int>, const InterferenceConfigResult*> at;
  for (const auto& c : configs) {
    if (c.chunk != chunk || c.decode == 0) continue;
    ds.insert(c.decode);
    ps.insert(c.prefill_tokens);
    at[{c.decode, c.prefill_tokens}] = &c;
  }
  {
    std::ofstream heat(dir + "/heatmap.dat");
    heat << "D\\P";
    for (int p : ps) heat << " " << p;
    heat << "\n";
    for (int d : ds) {
      heat << d;
      for (int p : ps) {
        auto it = at.find({d, p});
        heat << " "
             << (it == at.end() ? std::string("NaN")
                                : absl::StrFormat("%.3f", it->second->penalty_ratio));
      }
      heat << "\n";
    }
    std::ofstream even(dir + "/breakeven.dat");
    for (int d : ds) {
      even << "\"D=" << d << "\"\n";
      for (int p : ps) {
        auto it = at.find({d, p});
        if (it != at.end())
          even << p << " " << std::max(1e-3, it->second->total_interference_ms) << "\n";
      }
      even << "\n\n";
    }
  }
  const std::string script = absl::StrFormat(
      "set terminal pngcairo size 900,600 noenhanced\n"
      "set output '%1$s/heatmap.png'\n"
      "set title 'TPOT penalty ratio (during / baseline), chunk %2$d'\n"
      "set xlabel 'new prefill tokens P'\nset ylabel 'running decodes D'\n"
      "set cblabel 'penalty ratio'\nset palette rgbformulae 22,13,-31\n"
      "plot '%1$s/heatmap.dat' matrix rowheaders columnheaders using 1:2:3 with image notitle, \\\n"
      "     '%1$s/heatmap.dat' matrix rowheaders columnheaders using 1:2:(sprintf('%%.2f', $3)) "
      "with labels notitle\n"
      "set output '%1$s/breakeven.png'\n"
      "set title 'Total interference vs the offload cost (%3$.1f ms), chunk %2$d: above the line, "
      "offload wins'\n"
      "set xlabel 'new prefill tokens P'\nset ylabel 'total interference (ms over all running "
      "streams)'\n"
      "set logscale xy\nset key left top\n"
      "plot for [i=0:%4$d] '%1$s/breakeven.dat' index i using 1:2 with linespoints title "
      "columnheader(1), \\\n"
      "     %3$f with lines dashtype 2 linewidth 2 title 'offload cost'\n",
      dir, chunk, transfer_cost_ms, std::max(0, static_cast<int>(ds.size()) - 1));
  {
    std::ofstream out(dir + "/plots.gnuplot");
    out << script;
  }
  if (ds.empty()) return absl::OkStatus();
  auto run = RunCommand({"gnuplot", dir + "/plots.gnuplot"}, {}, absl::Seconds(60));
  if (!run.ok()) return absl::UnavailableError(absl::StrCat("gnuplot: ", run.status().message()));
  return absl::OkStatus();
}

}  // namespace pdserve::bench
