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
  cost_model->ObservePrefill(outcome.model_fingerprint, tokens, outcome.compute_ms);
  cost_model->ObserveTransferTail(outcome.transfer_tail_ms, last_layer_bytes);
}

}  // namespace pdserve::router
