// The router's cost model (docs/architecture.md): how long a decode worker's engine step
// takes given what it batches, how long a prefill worker takes for a prompt, and what a
// layer-wise KV transfer adds after the prefill. Coefficients start from cost_model.json
// (written by `pdserve-bench interference`; a documented default ships in deploy/) and are
// refined online, per model, from the step samples decode workers report and the timings of
// finished offloaded requests.
//
// Step time (ms) is linear in what the step computes:
//   step = intercept + per_decode * D + per_prefill_token * P
//          + per_attention * A_decode + per_prefill_attention * A_prefill
// with D decode tokens, P prefill tokens, A_decode the KV positions the decodes attend to
// (sum over them) and A_prefill the positions the prefill chunks' tokens attend to (a chunk of
// P tokens after S cached ones adds P*S + P(P+1)/2). The two attention terms have their own
// coefficients because they cost differently per position: on a GPU a decode's attention
// reads each position's K/V from memory for one query (memory-bound) while a chunk's reuses
// it across all its queries (compute-bound), some 70x cheaper per position on an H100; one
// shared coefficient over-predicts local chunked prefill and over-offloads. A profile without
// per_prefill_attention_ms keeps the shared one. Prefill time (ms) of a prompt of L tokens on
// a prefill worker:
//   prefill(L) = overhead + per_token * L + per_token_squared * L^2
// and of a batch of prompts L_i computed in one forward (they do not attend to each other):
//   overhead + per_token * sum L_i + per_token_squared * sum L_i^2, which is how it is learned:
// an offloaded request's measured compute time is its batch's.
// Until offloaded prefills of a model have been timed, its prefill time is predicted from the
// decode workers' step fit (the whole prompt as one step) when that has samples.
// Transfer tail (ms) of a layer-wise transfer: latency + one layer's bytes / bandwidth.
// Online refinement is recursive least squares with exponential forgetting.
// Thread-safety: all methods are safe from any thread.
#ifndef PDSERVE_ROUTER_COST_MODEL_H_
#define PDSERVE_ROUTER_COST_MODEL_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/perf_profile.h"
#include "router/arrival_mix.h"
#include "router/worker_info.h"

namespace pdserve::router {

// The formulas and their coefficients are the performance profile's (common/perf_profile.h):
// one definition with pdserve-sim and the emulated backend.
using ::pdserve::CostModelParams;
using ::pdserve::LoadCostModel;
using ::pdserve::ParseCostModel;
using ::pdserve::StepWork;

// What one forward of a prefill worker computed: the prompts it batched.
struct PrefillBatchWork {
  double tokens = 0;         // Their tokens.
  double token_squares = 0;  // The sum over them of each one's tokens squared.
  static PrefillBatchWork Prompt(double tokens) { return {tokens, tokens * tokens}; }
};

class CostModel {
 public:
  explicit CostModel(const CostModelParams& params);

  // Predictions for the model with `fingerprint` (the prior until it has samples).
  double StepMs(uint64_t fingerprint, const StepWork& work) const;
  double PrefillMs(uint64_t fingerprint, double prompt_tokens) const;
  // Of prompts batched in one forward (or queued one after another, less the overheads).
  double PrefillMs(uint64_t fingerprint, const PrefillBatchWork& batch) const;
  // The share of a prefill worker's time that arrivals of these length classes take: the sum
  // over them of per_s * PrefillMs(mean_tokens) / 1000, in their order. The same numbers as
  // that sum of PrefillMs calls, under one lock: a decision prices every prefill candidate's
  // classes (tens each), and a lock per class was most of a decision among 64 of them.
  double PrefillBusyShare(uint64_t fingerprint, absl::Span<const LengthClassRate> classes) const;
  double TransferTailMs(double last_layer_bytes) const;
  double offload_overhead_ms() const { return params_.offload_overhead_ms; }

  // Online refinement. Each returns the prediction made before learning from the sample.
  double ObserveStep(uint64_t fingerprint, const StepWork& work, double ms);
  // `weight` in (0, 1]: the sample's weight in the fit (a batch reported once per prompt in
  // it weighs 1 in all when each report carries its prompt's share).
  double ObservePrefill(uint64_t fingerprint, const PrefillBatchWork& batch, double ms,
                        double weight = 1);
  void ObserveTransferTail(double ms, double last_layer_bytes);

  // Current coefficients by name (a fingerprint's fit is reported as "<name>@<hex>").
  std::map<std::string, double> Coefficients() const;
  const CostModelParams& params() const { return params_; }

 private:
  static constexpr int kStepFeatures = 5;
  // Recursive least squares over a few features with exponential forgetting.
  template <int N>
  struct Fit {
    std::array<double, N> theta{};
    std::array<std::array<double, N>, N> p{};
    int64_t samples = 0;
    double Predict(const std::array<double, N>& x) const;
    void Update(const std::array<double, N>& x, double y, double forgetting, double max_variance);
  };
  const Fit<kStepFeatures>& StepFitLocked(uint64_t fingerprint) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  const Fit<3>& PrefillFitLocked(uint64_t fingerprint) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  double PrefillMsLocked(uint64_t fingerprint, const PrefillBatchWork& batch) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const CostModelParams params_;
  Fit<kStepFeatures> step_prior_;
  Fit<3> prefill_prior_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Fit<kStepFeatures>> step_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Fit<3>> prefill_ ABSL_GUARDED_BY(mu_);
  double transfer_latency_ms_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_COST_MODEL_H_
