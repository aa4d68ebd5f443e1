// pdserve-sim with live rebalancing: the router's planner moves workers where the work is,
// a decode worker leaving its role hands back what has not started, and nothing is lost.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "router/rebalance_planner.h"
#include "sim/simulator.h"
#include "tests/sim/sim_test_inputs.h"

namespace pdserve::sim {
namespace {

using testing::Config;
using testing::Poisson;

// With rebalancing that reacts within a second or two (objectives TTFT 200 ms, TPOT 20 ms).
SimConfig RebalancingConfig(const std::string& policy, int decode, int prefill) {
  SimConfig c = Config(policy, decode, prefill);
  c.policy.slo = {.ttft_ms = 200, .tpot_ms = 20};
  c.rebalance = router::RebalanceConfig{.interval = absl::Milliseconds(500),
                                        .min_between = absl::Seconds(1),
                                        .confirm = 1,
                                        .high = 0.3,
                                        .margin = 0.1};
  return c;
}

// With rebalancing every worker can switch role: a prefill-heavy phase (long prompts, two
// output tokens) then a decode-heavy one (short prompts, long outputs). The router's own planner
// moves workers to where the work is (a worker that started as a prefill worker decodes in the
// second phase), every request completes, nothing is left held, and the run is deterministic.
TEST(SimTest, WithRebalancingWorkersFollowAShiftingMixAndNothingIsLost) {
  SimConfig c = RebalancingConfig("cost_model", 2, 2);
  std::vector<SimRequest> requests = Poisson(200, 10, 800, 2);
  std::vector<SimRequest> second = Poisson(200, 10, 20, 200);
  const double offset = requests.back().arrival_s + 1;
  for (SimRequest& r : second) {
    r.arrival_s += offset;
    r.phase = 1;
    requests.push_back(r);
  }
  auto a = Simulate(c, requests);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GE(a->counters.role_switches, 1u);
  EXPECT_EQ(a->counters.role_switches_unfinished, 0u);
  // Each completed switch is in the log, done after it was ordered, with the planner's reason.
  ASSERT_EQ(a->switches.size(), a->counters.role_switches);
  for (const SimRoleSwitch& s : a->switches) {
    EXPECT_GE(s.done_ms, s.ordered_ms);
    EXPECT_NE(s.reason.find("pressure"), std::string::npos) << s.reason;
  }
  EXPECT_EQ(a->counters.sequences_left, 0u);
  EXPECT_EQ(a->counters.blocks_held_at_end, 0u);
  bool started_as_prefill_decodes = false;
  for (const SimRequestResult& r : a->requests) {
    ASSERT_TRUE(r.ok) << r.error;
    if (r.phase == 1 && r.decode_worker >= 2) started_as_prefill_decodes = true;
  }
  EXPECT_TRUE(started_as_prefill_decodes);
  auto b = Simulate(c, requests);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->counters.role_switches, a->counters.role_switches);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(a->requests[i].ttft_ms, b->requests[i].ttft_ms) << i;
    EXPECT_EQ(a->requests[i].decode_worker, b->requests[i].decode_worker) << i;
  }
  // Without it the roles stay as they started.
  c.rebalance.reset();
  auto fixed = Simulate(c, requests);
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->counters.role_switches, 0u);
  for (const SimRequestResult& r : fixed->requests) EXPECT_LT(r.decode_worker, 2);
}

// A decode worker moving to prefill because prompts back up holds offloads queued behind that
// backlog: it hands them back (the product's rule, decode::EngineLoop::BeginDrainHandingBack),
// they are placed on other decode workers, and its switch waits only for what has started.
TEST(SimTest, ADecodeWorkerLeavingTheRoleHandsBackWhatHasNotStartedAndNothingIsLost) {
  SimConfig c = RebalancingConfig("always_offload", 3, 1);
  // 45 ms a prefill at 30 a second: one prefill worker falls behind at once.
  const std::vector<SimRequest> requests = Poisson(300, 30, 800, 2);
  auto a = Simulate(c, requests);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GT(a->counters.handed_back, 0u);
  ASSERT_GE(a->counters.role_switches, 1u);
  EXPECT_EQ(a->counters.role_switches_unfinished, 0u);
  // A switch to prefill waits for the streams that have started (two tokens each) and then
  // re-registers one report interval later; the offloads it held would have waited their turn
  // in the prefill queue.
  for (const SimRoleSwitch& s : a->switches) {
    if (s.to != router::WorkerRole::kPrefill) continue;
    EXPECT_LE(s.done_ms - s.ordered_ms, c.report_interval_ms + 50) << "worker " << s.worker;
  }
  for (const SimRequestResult& r : a->requests) ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(a->counters.sequences_left, 0u);
  EXPECT_EQ(a->counters.blocks_held_at_end, 0u);
}

}  // namespace
}  // namespace pdserve::sim
