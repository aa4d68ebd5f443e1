#include "router/cost_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pdserve::router {
namespace {

// Feature scales keep the least-squares problem well conditioned: every feature is O(1) for
// typical steps.
constexpr double kPrefillScale = 100.0;  // Step prefill tokens per unit.
constexpr double kAttentionScale = 1e5;  // Step attention positions per unit.
constexpr double kPromptScale = 1000.0;  // Prefill prompt tokens per unit.
// Samples before a fit replaces its prior in PrefillMs.
constexpr int64_t kMinPrefillSamples = 3;

std::array<double, 5> StepFeatures(const StepWork& w) {
  return {1.0, w.decode, w.prefill_tokens / kPrefillScale, w.decode_attention / kAttentionScale,
          w.prefill_attention / kAttentionScale};
}
std::array<double, 3> PrefillFeatures(const PrefillBatchWork& batch) {
  return {1.0, batch.tokens / kPromptScale, batch.token_squares / (kPromptScale * kPromptScale)};
}

}  // namespace

template <int N>
double CostModel::Fit<N>::Predict(const std::array<double, N>& x) const {
  double y = 0;
  for (int i = 0; i < N; ++i) y += theta[i] * x[i];
  return y;
}

template <int N>
void CostModel::Fit<N>::Update(const std::array<double, N>& x, double y, double forgetting,
                               double max_variance) {
  // Standard RLS: k = P x / (lambda + x' P x); theta += k (y - x' theta); P = (P - k x' P) /
  // lambda.
  std::array<double, N> px{};
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < N; ++j) px[i] += p[i][j] * x[j];
  }
  double denom = forgetting;
  for (int i = 0; i < N; ++i) denom += x[i] * px[i];
  const double error = y - Predict(x);
  for (int i = 0; i < N; ++i) theta[i] += px[i] / denom * error;
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < N; ++j) p[i][j] = (p[i][j] - px[i] * px[j] / denom) / forgetting;
  }
  // Forgetting inflates P along directions the samples do not excite (a decode worker that
  // only decodes says nothing about prefill tokens): cap it at the prior's size so that one
  // unusual step cannot swing the fit (covariance wind-up).
  double trace = 0;
  for (int i = 0; i < N; ++i) trace += p[i][i];
  if (trace > N * max_variance) {
    const double scale = N * max_variance / trace;
    for (int i = 0; i < N; ++i) {
      for (int j = 0; j < N; ++j) p[i][j] *= scale;
    }
  }
  ++samples;
}

CostModel::CostModel(const CostModelParams& params)
    : params_(params), transfer_latency_ms_(params.transfer_latency_ms) {
  step_prior_.theta = {params_.step_intercept_ms, params_.step_per_decode_ms,
                       params_.step_per_prefill_token_ms * kPrefillScale,
                       params_.step_per_attention_ms * kAttentionScale,
                       params_.step_per_prefill_attention_ms * kAttentionScale};
  for (int i = 0; i < kStepFeatures; ++i) step_prior_.p[i][i] = params_.prior_variance;
  prefill_prior_.theta = {params_.prefill_overhead_ms, params_.prefill_per_token_ms * kPromptScale,
                          params_.prefill_per_token_squared_ms * kPromptScale * kPromptScale};
  for (int i = 0; i < 3; ++i) prefill_prior_.p[i][i] = params_.prior_variance;
}

const CostModel::Fit<CostModel::kStepFeatures>& CostModel::StepFitLocked(
    uint64_t fingerprint) const {
  auto it = step_.find(fingerprint);
  return it != step_.end() ? it->second : step_prior_;
}

const CostModel::Fit<3>& CostModel::PrefillFitLocked(uint64_t fingerprint) const {
  auto it = prefill_.find(fingerprint);
  return it != prefill_.end() ? it->second : prefill_prior_;
}

double CostModel::StepMs(uint64_t fingerprint, const StepWork& work) const {
  absl::ReaderMutexLock lock(&mu_);
  return std::max(0.0, StepFitLocked(fingerprint).Predict(StepFeatures(work)));
}

double CostModel::PrefillMs(uint64_t fingerprint, double tokens) const {
  return PrefillMs(fingerprint, PrefillBatchWork::Prompt(tokens));
}

double CostModel::PrefillMs(uint64_t fingerprint, const PrefillBatchWork& batch) const {
  absl::ReaderMutexLock lock(&mu_);
  return PrefillMsLocked(fingerprint, batch);
}

double CostModel::PrefillBusyShare(uint64_t fingerprint,
                                   absl::Span<const LengthClassRate> classes) const {
  absl::ReaderMutexLock lock(&mu_);
  double share = 0;
  for (const LengthClassRate& c : classes)
    share += c.per_s * PrefillMsLocked(fingerprint, PrefillBatchWork::Prompt(c.mean_tokens)) / 1e3;
  return share;
}

double CostModel::PrefillMsLocked(uint64_t fingerprint, const PrefillBatchWork& batch) const {
  auto prefill = prefill_.find(fingerprint);
  if (prefill != prefill_.end() && prefill->second.samples >= kMinPrefillSamples) {
    return std::max(0.0, prefill->second.Predict(PrefillFeatures(batch)));
  }
  // Until offloaded prefills have been timed, a prefill worker is taken to compute like a
  // decode worker running the whole prompt in one step (same model, same kind of machine):
  // that keeps local and offloaded predictions on one scale when only decode workers have
  // reported so far.
  auto step = step_.find(fingerprint);
  if (step != step_.end() && step->second.samples >= kMinPrefillSamples) {
    const double base = step->second.Predict(StepFeatures(StepWork{}));
    // The prompts' chunks: each attends to its own tokens (StepWork::Chunk's, summed).
    const StepWork chunks{.prefill_tokens = batch.tokens,
                          .prefill_attention = (batch.token_squares + batch.tokens) / 2};
    return std::max(0.0, step->second.Predict(StepFeatures(chunks)) - base) +
           std::max(0.0, prefill_prior_.theta[0]);
  }
  return std::max(0.0, prefill_prior_.Predict(PrefillFeatures(batch)));
}

double CostModel::TransferTailMs(double last_layer_bytes) const {
  absl::ReaderMutexLock lock(&mu_);
  return transfer_latency_ms_ + last_layer_bytes / params_.transfer_bytes_per_ms;
}

double CostModel::ObserveStep(uint64_t fingerprint, const StepWork& work, double ms) {
  absl::MutexLock lock(&mu_);
  Fit<kStepFeatures>& fit = step_.try_emplace(fingerprint, step_prior_).first->second;
  const auto x = StepFeatures(work);
  const double predicted = std::max(0.0, fit.Predict(x));
  fit.Update(x, ms, params_.forgetting, params_.prior_variance);
  return predicted;
}

double CostModel::ObservePrefill(uint64_t fingerprint, const PrefillBatchWork& batch, double ms,
                                 double weight) {
  absl::MutexLock lock(&mu_);
  Fit<3>& fit = prefill_.try_emplace(fingerprint, prefill_prior_).first->second;
  auto x = PrefillFeatures(batch);
  const double predicted = std::max(0.0, fit.Predict(x));
  // Weighted least squares: the sample's row scaled by the root of its weight.
  const double root = std::sqrt(std::clamp(weight, 1e-6, 1.0));
  for (double& xi : x) xi *= root;
  fit.Update(x, ms * root, params_.forgetting, params_.prior_variance);
  return predicted;
}

void CostModel::ObserveTransferTail(double ms, double last_layer_bytes) {
  absl::MutexLock lock(&mu_);
  const double latency = std::max(0.0, ms - last_layer_bytes / params_.transfer_bytes_per_ms);
  transfer_latency_ms_ = 0.9 * transfer_latency_ms_ + 0.1 * latency;
}

std::map<std::string, double> CostModel::Coefficients() const {
  absl::ReaderMutexLock lock(&mu_);
  std::map<std::string, double> out = {
      {"step.intercept_ms", params_.step_intercept_ms},
      {"step.per_decode_ms", params_.step_per_decode_ms},
      {"step.per_prefill_token_ms", params_.step_per_prefill_token_ms},
      {"step.per_attention_ms", params_.step_per_attention_ms},
      {"step.per_prefill_attention_ms", params_.step_per_prefill_attention_ms},
      {"prefill.overhead_ms", params_.prefill_overhead_ms},
      {"prefill.per_token_ms", params_.prefill_per_token_ms},
      {"prefill.per_token_squared_ms", params_.prefill_per_token_squared_ms},
      {"transfer.latency_ms", transfer_latency_ms_},
      {"transfer.bytes_per_ms", params_.transfer_bytes_per_ms},
  };
  for (const auto& [fp, fit] : step_) {
    const std::string at = absl::StrFormat("@%016x", fp);
    out["step.intercept_ms" + at] = fit.theta[0];
    out["step.per_decode_ms" + at] = fit.theta[1];
    out["step.per_prefill_token_ms" + at] = fit.theta[2] / kPrefillScale;
    out["step.per_attention_ms" + at] = fit.theta[3] / kAttentionScale;
    out["step.per_prefill_attention_ms" + at] = fit.theta[4] / kAttentionScale;
    out["step.samples" + at] = static_cast<double>(fit.samples);
  }
  for (const auto& [fp, fit] : prefill_) {
    const std::string at = absl::StrFormat("@%016x", fp);
    out["prefill.overhead_ms" + at] = fit.theta[0];
    out["prefill.per_token_ms" + at] = fit.theta[1] / kPromptScale;
    out["prefill.per_token_squared_ms" + at] = fit.theta[2] / (kPromptScale * kPromptScale);
    out["prefill.samples" + at] = static_cast<double>(fit.samples);
  }
  return out;
}

}  // namespace pdserve::router
