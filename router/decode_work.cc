#include "router/decode_work.h"

#include <algorithm>

namespace pdserve::router {

int DecodeLoad(const WorkerEntry& e) {
  return e.load.running + e.load.waiting + e.load.awaiting_kv + e.dispatched_since_report;
}

double DecodeContext(const WorkerEntry& e) {
  const double reported =
      e.load.context_tokens > 0
          ? static_cast<double>(e.load.context_tokens)
          : (e.load.running + e.load.waiting + e.load.awaiting_kv) * e.attention_per_decode;
  return reported + static_cast<double>(e.dispatched_tokens_since_report);
}

DecodeWorkPrice PriceDecodeWork(const CostModel& cost_model, uint64_t fingerprint) {
  constexpr double kPositions = 1 << 20;  // Far from rounding in the fit's scaled feature.
  const double base = cost_model.StepMs(fingerprint, {});
  return {
      .per_stream_ms = std::max(0.0, cost_model.StepMs(fingerprint, {.decode = 1}) - base),
      .per_position_ms =
          std::max(0.0, cost_model.StepMs(fingerprint, {.decode_attention = kPositions}) - base) /
          kPositions};
}

}  // namespace pdserve::router
