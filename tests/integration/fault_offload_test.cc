// Fault suite (label "fault"): the offloaded prefill path through a whole cluster (router,
// prefill worker, decode worker), each scenario ending with the shared baseline check.
#include <signal.h>

#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/fault_check.h"
#include "tests/testing/greedy_reference.h"
#include "tools/client/generation_client.h"

namespace pdserve::testing {
namespace {

ClusterOptions OffloadCluster(std::vector<std::string> prefill_flags = {}) {
  return ClusterOptions{.prefill_workers = 1,
                        .decode_workers = 1,
                        .router_flags = {"--policy=always_offload"},
                        .prefill_flags = std::move(prefill_flags)};
}

// A stopped (SIGSTOP) prefill worker once stalled its offloaded request for the whole stop
// (22.5 s TTFT against a 2 s objective): its Prefill call was only abandoned at the attempt's
// 60 s deadline. The decode worker now checks the silent worker's health, falls back to a
// local prefill within about 1.5 s, and frees the quarantined blocks once the worker
// continues and acknowledges.
TEST(OffloadFaultTest, StoppedPrefillWorkerFallsBackWithinTheTtftObjectiveThenContinues) {
  auto cluster = LocalCluster::Start(OffloadCluster());
  ASSERT_NE(cluster, nullptr);
  GreedyReference reference;
  std::mt19937 rng(9);
  const std::vector<int32_t> prompt = reference.RandomPrompt(rng, 300);
  ChildProcess& prefill = *cluster->prefill()[0];
  ASSERT_EQ(kill(prefill.pid(), SIGSTOP), 0);
  const auto out = client::CallGenerate(cluster->channel(), client::MakeRequest(prompt, 6), absl::Seconds(60));
  ASSERT_EQ(kill(prefill.pid(), SIGCONT), 0);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  const v1::Placement& p = out.result.placement();
  EXPECT_EQ(p.mode(), v1::PLACEMENT_MODE_OFFLOAD) << p.DebugString();
  EXPECT_TRUE(p.fell_back_to_local()) << p.DebugString();
  EXPECT_EQ(p.fallback_cause(), "prefill_unresponsive") << p.DebugString();
  EXPECT_LT(out.result.timings().ttft_ms(), 2000) << out.result.timings().DebugString();
  EXPECT_EQ(out.tokens, reference.Generate(prompt, 6));
  // The continued worker re-registers and acknowledges the cancelled transfer.
  EXPECT_TRUE(cluster->WaitForWorkers(1, 1, absl::Seconds(10)));
  ExpectClusterAtBaseline(*cluster);
}

// Stopped and never continued, then killed: the quarantined blocks are freed once its
// connection is refused (the process is gone), not held until the attempt's deadline.
TEST(OffloadFaultTest, StoppedThenKilledPrefillWorkerReleasesItsQuarantineOnceGone) {
  auto cluster = LocalCluster::Start(OffloadCluster());
  ASSERT_NE(cluster, nullptr);
  GreedyReference reference;
  std::mt19937 rng(10);
  const std::vector<int32_t> prompt = reference.RandomPrompt(rng, 200);
  ChildProcess& prefill = *cluster->prefill()[0];
  ASSERT_EQ(kill(prefill.pid(), SIGSTOP), 0);
  const auto out = client::CallGenerate(cluster->channel(), client::MakeRequest(prompt, 4), absl::Seconds(60));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.result.placement().fallback_cause(), "prefill_unresponsive");
  EXPECT_EQ(out.tokens, reference.Generate(prompt, 4));
  const v1::DecodeStats held = LocalCluster::DecodeStats(*cluster->decode()[0]);
  EXPECT_GT(held.blocks().quarantined(), 0u) << "a stopped writer's blocks must stay quarantined";
  prefill.Kill();
  cluster->prefill().clear();  // Gone for good: the baseline check expects no prefill worker.
  EXPECT_TRUE(LocalCluster::WaitForBaseline(*cluster->decode()[0], absl::Seconds(10)))
      << LocalCluster::DecodeStats(*cluster->decode()[0]).DebugString();
  ExpectClusterAtBaseline(*cluster);
}

}  // namespace
}  // namespace pdserve::testing
