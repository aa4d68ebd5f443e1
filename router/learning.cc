#include "router/learning.h"

#include <algorithm>

namespace pdserve::router {

PlacementForLearning ForLearning(const PlacementResult& placed) {
  return PlacementForLearning{.num_layers = placed.num_layers,
                              .estimated_last_layer_bytes = placed.last_layer_bytes};
}

void LearnFromOffload(const PrefillOutcome& outcome, const PlacementForLearning& placement,
                      CostModel* cost_model) {
  if (outcome.compute_ms <= 0) return;
  // Learn from what was measured: the tokens the prefill worker computed and the bytes it
  // wrote (a decode worker that does not report them yet: the router's own estimate).
  const double tokens =
      outcome.computed_tokens > 0 ? outcome.computed_tokens : outcome.prompt_tokens;
  const double last_layer_bytes =
      outcome.transfer_bytes > 0
          ? static_cast<double>(outcome.transfer_bytes) / std::max(1, placement.num_layers)
          : placement.estimated_last_layer_bytes;
  // The compute time is its batch's: a prompt batched with others learned as if alone made a
  // prompt of 1k tokens in a batch of 16k look 16 times slower, and the fit, extrapolated,
  // predicted 125 s for a 121k-token prompt the profile computes in 5.9 s (pdserve-sim, Mooncake
  // trace). Each prompt of a batch reports it and counts its share of the batch's tokens, so a
  // batch weighs one sample. Figures that cannot describe a batch holding this prompt (a worker
  // that does not report them, or a forged report) leave the prompt alone.
  PrefillBatchWork batch = PrefillBatchWork::Prompt(tokens);
  double weight = 1;
  const auto batch_tokens = static_cast<double>(outcome.batch_tokens);
  if (batch_tokens > tokens && outcome.batch_token_squares >= tokens * tokens &&
      outcome.batch_token_squares <= batch_tokens * batch_tokens) {
    batch = {batch_tokens, outcome.batch_token_squares};
    weight = tokens / batch_tokens;
  }
  cost_model->ObservePrefill(outcome.model_fingerprint, batch, outcome.compute_ms, weight);
  cost_model->ObserveTransferTail(outcome.transfer_tail_ms, last_layer_bytes);
}

}  // namespace pdserve::router
