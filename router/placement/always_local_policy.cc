// always_local: every prefill runs chunked on its decode worker (a monolithic engine).
#include "router/placement/placement_policy.h"

namespace pdserve::router {
namespace {

class AlwaysLocalPolicy final : public PlacementPolicy {
 public:
  const std::string& name() const override { return name_; }
  PlacementDecision Decide(const PlacementInputs& in, const CostModel& model) const override {
    return Local(EstimateCosts(in, model), "policy_always_local");
  }

 private:
  const std::string name_ = "always_local";
};

}  // namespace

std::unique_ptr<PlacementPolicy> MakeAlwaysLocalPolicy(const PolicyConfig&) {
  return std::make_unique<AlwaysLocalPolicy>();
}

}  // namespace pdserve::router
