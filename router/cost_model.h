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
#include "router/worker_info.h"

namespace pdserve::router {

// What one engine step computes (see the step formula above).
struct StepWork {
  double decode = 0;             // D: decode tokens.
  double prefill_tokens = 0;     // P: prefill-chunk tokens.
  double decode_attention = 0;   // A_decode: KV positions the decodes attend to, summed.
  double prefill_attention = 0;  // A_prefill: KV positions the chunks' tokens attend to.
  // A chunk of `tokens` after `cached` ones: its P and A_prefill.
  static StepWork Chunk(double tokens, double cached) {
    return {.prefill_tokens = tokens,
            .prefill_attention = tokens * cached + tokens * (tokens + 1) / 2};
  }
  // What a step a decode worker reported computed.
  static StepWork Of(const StepObservation& s) {
    return {.decode = static_cast<double>(s.num_decode),
            .prefill_tokens = static_cast<double>(s.num_prefill_tokens),
            .decode_attention = static_cast<double>(s.context_tokens - s.prefill_context_tokens),
            .prefill_attention = static_cast<double>(s.prefill_context_tokens)};
  }
};

struct CostModelParams {
  // Decode worker step, ms.
  double step_intercept_ms = 2.0;
  double step_per_decode_ms = 0.3;
  double step_per_prefill_token_ms = 0.5;
  double step_per_attention_ms = 1e-5;          // Per KV position a decode attends to.
  double step_per_prefill_attention_ms = 1e-5;  // Per KV position a chunk's token attends to.
  // Prefill worker, ms.
  double prefill_overhead_ms = 2.0;
  double prefill_per_token_ms = 0.5;
  double prefill_per_token_squared_ms = 5e-6;
  // Layer-wise KV transfer tail: fixed latency plus the last layer at this bandwidth.
  double transfer_latency_ms = 0.5;
  double transfer_bytes_per_ms = 2e6;
  // gRPC round trips and scheduling the offload adds to TTFT, ms.
  double offload_overhead_ms = 2.0;
  // Online refinement: forgetting factor of the least-squares fits (1 = never forget) and
  // how much the prior is trusted (its variance; larger adapts faster).
  double forgetting = 0.995;
  double prior_variance = 100.0;

  absl::Status Validate() const;
  // The step formula with these coefficients (the prior; CostModel::StepMs predicts with the
  // refined fit).
  double StepMs(const StepWork& work) const;
};

// Parses cost_model.json (see deploy/cost_model.json for the format). Unknown keys are an
// error so that a typo does not silently keep a default.
absl::StatusOr<CostModelParams> ParseCostModel(const std::string& json_text);
absl::StatusOr<CostModelParams> LoadCostModel(const std::string& path);

class CostModel {
 public:
  explicit CostModel(const CostModelParams& params);

  // Predictions for the model with `fingerprint` (the prior until it has samples).
  double StepMs(uint64_t fingerprint, const StepWork& work) const;
  double PrefillMs(uint64_t fingerprint, double prompt_tokens) const;
  double TransferTailMs(double last_layer_bytes) const;
  double offload_overhead_ms() const { return params_.offload_overhead_ms; }

  // Online refinement. Each returns the prediction made before learning from the sample.
  double ObserveStep(uint64_t fingerprint, const StepWork& work, double ms);
  double ObservePrefill(uint64_t fingerprint, double prompt_tokens, double ms);
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
