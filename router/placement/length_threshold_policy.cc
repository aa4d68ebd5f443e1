// length_threshold: offload when the uncached prompt is at least N tokens. The static rule
// shipped disaggregated systems use (e.g. a conditional-disaggregation prefill length), kept
// as the baseline the cost model has to beat.
#include "router/placement/placement_policy.h"

namespace pdserve::router {
namespace {

class LengthThresholdPolicy final : public PlacementPolicy {
 public:
  explicit LengthThresholdPolicy(const PolicyConfig& config)
      : threshold_(config.length_threshold), alternates_(config.alternates) {}
  const std::string& name() const override { return name_; }
  PlacementDecision Decide(const PlacementInputs& in, const CostModel& model) const override {
    const CostEstimate e = EstimateCosts(in, model);
    if (e.prefill.empty()) return Local(e, "no_prefill_worker");
    if (in.uncached_tokens() >= threshold_) return Offload(e, alternates_, "length_threshold");
    return Local(e, "length_threshold");
  }

 private:
  const std::string name_ = "length_threshold";
  const int threshold_;
  const int alternates_;
};

}  // namespace

std::unique_ptr<PlacementPolicy> MakeLengthThresholdPolicy(const PolicyConfig& config) {
  return std::make_unique<LengthThresholdPolicy>(config);
}

}  // namespace pdserve::router
