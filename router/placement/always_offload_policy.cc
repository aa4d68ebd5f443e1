// always_offload: every prefill goes to a prefill worker when one exists (plain
// prefill/decode disaggregation).
#include "router/placement/placement_policy.h"

namespace pdserve::router {
namespace {

class AlwaysOffloadPolicy final : public PlacementPolicy {
 public:
  explicit AlwaysOffloadPolicy(const PolicyConfig& config) : alternates_(config.alternates) {}
  const std::string& name() const override { return name_; }
  PlacementDecision Decide(const PlacementInputs& in, const CostModel& model) const override {
    const CostEstimate e = EstimateCosts(in, model);
    if (e.prefill.empty()) return Local(e, "no_prefill_worker");
    return Offload(e, alternates_, "policy_always_offload");
  }

 private:
  const std::string name_ = "always_offload";
  const int alternates_;
};

}  // namespace

std::unique_ptr<PlacementPolicy> MakeAlwaysOffloadPolicy(const PolicyConfig& config) {
  return std::make_unique<AlwaysOffloadPolicy>(config);
}

}  // namespace pdserve::router
