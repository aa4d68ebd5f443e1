// The worker registry's test fixture, shared by the registry and placer tests and the role
// switch tests: a registry on a fake clock and the helpers that register and report workers.
#ifndef PDSERVE_TESTS_ROUTER_REGISTRY_FIXTURE_H_
#define PDSERVE_TESTS_ROUTER_REGISTRY_FIXTURE_H_

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "router/worker_registry.h"

namespace pdserve::router::testing {

inline constexpr uint64_t kFingerprint = 0xabc;

inline WorkerInfo Registration(const std::string& id, WorkerRole role,
                               const std::string& model = "m") {
  WorkerInfo r;
  r.worker_id = id;
  r.role = role;
  r.grpc_address = "127.0.0.1:" + std::to_string(1000 + id.size() * 7 + id.back());
  r.model = model;
  r.model_fingerprint = kFingerprint;
  r.kv_layout = KvLayout{.num_layers = 4,
                         .num_kv_heads = 2,
                         .head_dim = 32,
                         .block_size = 16,
                         .dtype = DType::kF32,
                         .num_blocks = role == WorkerRole::kDecode ? 1000 : 500};
  r.max_num_batched_tokens = 256;
  r.max_num_seqs = 64;
  r.max_context_tokens = 4096;
  r.vocab_size = 1000;
  r.epoch = 1;
  return r;
}

inline WorkerReport Load(int running = 0, int64_t free_blocks = 0) {
  WorkerReport r;
  r.load.running = running;
  r.load.free_blocks = free_blocks;
  return r;
}

class Listener final : public WorkerListener {
 public:
  void Interrupted(Interruption why, const std::string& message) override {
    whys.push_back(why);
    reasons.push_back(message);
  }
  std::vector<Interruption> whys;
  std::vector<std::string> reasons;
};

class RegistryTest : public ::testing::Test {
 protected:
  RegistryTest()
      : metrics_(prometheus_),
        cost_model_(CostModelParams()),
        registry_(&clock_, absl::Seconds(2), &cost_model_, &metrics_) {}

  FakeClock clock_;
  prometheus::Registry prometheus_;
  RouterMetrics metrics_;
  CostModel cost_model_;
  WorkerRegistry registry_;
};
// The sum of a counter family's series whose outcome label is `outcome`.
inline double CounterSum(prometheus::Registry& registry, const std::string& name,
                         const std::string& outcome) {
  double sum = 0;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name == "outcome" && l.value == outcome) sum += m.counter.value;
      }
    }
  }
  return sum;
}

}  // namespace pdserve::router::testing

#endif  // PDSERVE_TESTS_ROUTER_REGISTRY_FIXTURE_H_
