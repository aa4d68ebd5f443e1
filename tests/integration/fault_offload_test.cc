// Fault suite (label "fault"): the offloaded prefill path through a whole cluster (router,
// prefill worker, decode worker), each scenario ending with the shared baseline check.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/background_call.h"
#include "tests/integration/fault_check.h"
#include "tests/testing/greedy_reference.h"
#include "tests/testing/http_client.h"
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
// 60 s deadline. The decode worker now checks the silent worker's health, gives up on it
// within one liveness interval plus one liveness timeout (0.5 s + 1 s by default, inside the
// 2 s TTFT objective whatever the machine), prefills locally, and frees the quarantined blocks
// once the worker continues and acknowledges. The local prefill's own time depends on the
// machine (seconds on the portable kernels), so the bound is on the time before it.
TEST(OffloadFaultTest, StoppedPrefillWorkerFallsBackWithinTheTtftObjectiveThenContinues) {
  auto cluster = LocalCluster::Start(OffloadCluster());
  ASSERT_NE(cluster, nullptr);
  GreedyReference reference;
  std::mt19937 rng(9);
  const std::vector<int32_t> prompt = reference.RandomPrompt(rng, 300);
  ChildProcess& prefill = *cluster->prefill()[0];
  ASSERT_EQ(kill(prefill.pid(), SIGSTOP), 0);
  const auto out =
      client::CallGenerate(cluster->channel(), client::MakeRequest(prompt, 6), absl::Seconds(60));
  ASSERT_EQ(kill(prefill.pid(), SIGCONT), 0);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  const v1::Placement& p = out.result.placement();
  EXPECT_EQ(p.mode(), v1::PLACEMENT_MODE_OFFLOAD) << p.DebugString();
  EXPECT_TRUE(p.fell_back_to_local()) << p.DebugString();
  EXPECT_EQ(p.fallback_cause(), "prefill_unresponsive") << p.DebugString();
  const v1::StageTimings& t = out.result.timings();
  EXPECT_GT(t.offload_wait_ms(), 0) << t.DebugString();
  EXPECT_LT(t.offload_wait_ms(), 2000) << t.DebugString();
  // Everything else before the first token is the local prefill (and its queueing).
  EXPECT_GT(t.prefill_ms(), 0) << t.DebugString();
  EXPECT_LE(t.queue_ms() + t.offload_wait_ms() + t.prefill_ms(), t.ttft_ms() + 1)
      << t.DebugString();
  EXPECT_LT(t.ttft_ms() - t.prefill_ms(), 2000) << t.DebugString();
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
  const auto out =
      client::CallGenerate(cluster->channel(), client::MakeRequest(prompt, 4), absl::Seconds(60));
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

// Waits until the decode worker holds `n` sequences awaiting KV.
bool WaitForAwaitingKv(ChildProcess& decode, uint32_t n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (LocalCluster::DecodeStats(decode).awaiting_kv() == n) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// A prefill worker alive (its health check answers) but far slower than predicted once held
// its offloaded request for the attempt timeout (60 s) or until it finished. The decode
// worker now abandons the attempt at the request's TTFT objective (here 1 s; the prefill
// would take 4 layers x 1.5 s) and prefills locally: the first token comes within the
// objective plus the local prefill, and the abandoned worker's blocks come back once it
// stopped at the attempt's deadline.
TEST(OffloadFaultTest, AnAliveButSlowPrefillWorkerIsAbandonedAtTheTtftObjective) {
  auto cluster = LocalCluster::Start(OffloadCluster({"--layer_delay=1500ms"}));
  ASSERT_NE(cluster, nullptr);
  GreedyReference reference;
  std::mt19937 rng(10);
  const std::vector<int32_t> prompt = reference.RandomPrompt(rng, 200);
  v1::GenerateRequest request = client::MakeRequest(prompt, 6);
  request.mutable_objectives()->set_ttft_ms(1000);
  const auto out = client::CallGenerate(cluster->channel(), request, absl::Seconds(60));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  const v1::Placement& p = out.result.placement();
  EXPECT_EQ(p.mode(), v1::PLACEMENT_MODE_OFFLOAD) << p.DebugString();
  EXPECT_TRUE(p.fell_back_to_local()) << p.DebugString();
  EXPECT_EQ(p.fallback_cause(), "ttft_budget") << p.DebugString();
  const v1::StageTimings& t = out.result.timings();
  EXPECT_GE(t.offload_wait_ms(), 900) << t.DebugString();   // It was given its objective...
  EXPECT_LT(t.offload_wait_ms(), 3000) << t.DebugString();  // ...not the 6 s it would take.
  EXPECT_LT(t.ttft_ms() - t.prefill_ms(), 3000) << t.DebugString();
  EXPECT_EQ(out.tokens, reference.Generate(prompt, 6));
  ExpectClusterAtBaseline(*cluster);
}

TEST(OffloadFaultTest, PrefillKilledAfterSomeLayersFallsBackWithIdenticalTokens) {
  auto cluster = LocalCluster::Start(OffloadCluster({"--layer_delay=300ms"}));
  ASSERT_NE(cluster, nullptr);
  GreedyReference reference;
  std::mt19937 rng(11);
  const std::vector<int32_t> prompt = reference.RandomPrompt(rng, 200);
  BackgroundCall call(cluster->channel(), client::MakeRequest(prompt, 8));
  ASSERT_TRUE(WaitForAwaitingKv(*cluster->decode()[0], 1, absl::Seconds(10)));
  // Two of the four layers written.
  ASSERT_TRUE(WaitForMetricAtLeast(cluster->prefill()[0]->metrics_address(),
                                   "pdserve_kv_transfer_layers_total", 2));
  cluster->prefill()[0]->Kill();
  cluster->prefill().clear();
  const auto& out = call.Join();
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_TRUE(out.result.placement().fell_back_to_local());
  EXPECT_EQ(out.tokens, reference.Generate(prompt, 8));
  ExpectClusterAtBaseline(*cluster);
}

TEST(OffloadFaultTest, CancelWhileAwaitingKvAndMidDecodeLeaveNothingBehind) {
  auto cluster = LocalCluster::Start(OffloadCluster({"--layer_delay=300ms"}));
  ASSERT_NE(cluster, nullptr);
  std::mt19937 rng(12);
  GreedyReference reference;
  {
    BackgroundCall awaiting(cluster->channel(),
                            client::MakeRequest(reference.RandomPrompt(rng, 200), 8));
    ASSERT_TRUE(WaitForAwaitingKv(*cluster->decode()[0], 1, absl::Seconds(10)));
    ASSERT_TRUE(WaitForMetricAtLeast(cluster->prefill()[0]->metrics_address(),
                                     "pdserve_kv_transfer_layers_total", 1));
    awaiting.Cancel();
    EXPECT_EQ(awaiting.Join().status.error_code(), grpc::StatusCode::CANCELLED);
  }
  {
    v1::GenerateRequest r = client::MakeRequest(reference.RandomPrompt(rng, 20), 3000);
    r.mutable_sampling()->set_ignore_eos(true);
    BackgroundCall decoding(cluster->channel(), r);
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (decoding.tokens() < 5 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
    ASSERT_GE(decoding.tokens(), 5);
    decoding.Cancel();
    EXPECT_EQ(decoding.Join().status.error_code(), grpc::StatusCode::CANCELLED);
  }
  ExpectClusterAtBaseline(*cluster);
}

// The decode worker dies, or stops, while a prefill worker writes into it, before the
// request's first token: the router places the request again on the other decode worker (same
// tokens), and the prefill worker stops writing and keeps serving. Killed, the worker's stream
// fails and its registration closes, in either order (a request once ended UNAVAILABLE when
// the registry's news came first); stopped, only the registry notices (no load report).
enum class DecodeFault { kKilled, kStopped };
void PrintTo(DecodeFault fault, std::ostream* os) {
  *os << (fault == DecodeFault::kKilled ? "killed" : "stopped");
}

class DecodeLostDuringTransferTest : public ::testing::TestWithParam<DecodeFault> {};

TEST_P(DecodeLostDuringTransferTest, TheRequestMovesAndThePrefillWorkerKeepsServing) {
  auto cluster = LocalCluster::Start(ClusterOptions{.prefill_workers = 1,
                                                    .decode_workers = 2,
                                                    .router_flags = {"--policy=always_offload"},
                                                    .prefill_flags = {"--layer_delay=300ms"}});
  ASSERT_NE(cluster, nullptr);
  GreedyReference reference;
  std::mt19937 rng(13);
  const std::vector<int32_t> first = reference.RandomPrompt(rng, 200);
  BackgroundCall call(cluster->channel(), client::MakeRequest(first, 8));
  ChildProcess* victim = nullptr;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (victim == nullptr && absl::Now() < deadline) {
    for (auto& d : cluster->decode()) {
      if (LocalCluster::DecodeStats(*d).awaiting_kv() == 1) victim = d.get();
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_NE(victim, nullptr);
  ASSERT_TRUE(WaitForMetricAtLeast(cluster->prefill()[0]->metrics_address(),
                                   "pdserve_kv_transfer_layers_total", 1));
  if (GetParam() == DecodeFault::kKilled) {
    victim->Kill();
  } else {
    ASSERT_EQ(kill(victim->pid(), SIGSTOP), 0);
  }
  const auto& out = call.Join();
  victim->Kill();  // A stopped one too: it is gone for good.
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens, reference.Generate(first, 8));
  EXPECT_EQ(cluster->DecodeById(out.result.placement().decode_worker_id()) == victim, false);
  auto& decode = cluster->decode();
  decode.erase(
      std::find_if(decode.begin(), decode.end(), [&](const auto& d) { return d.get() == victim; }));
  ASSERT_TRUE(cluster->WaitForWorkers(1, 1, absl::Seconds(10)));
  const std::vector<int32_t> prompt = reference.RandomPrompt(rng, 100);
  const auto next =
      client::CallGenerate(cluster->channel(), client::MakeRequest(prompt, 5), absl::Seconds(60));
  ASSERT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_EQ(next.tokens, reference.Generate(prompt, 5));
  ExpectClusterAtBaseline(*cluster);
}

INSTANTIATE_TEST_SUITE_P(Faults, DecodeLostDuringTransferTest,
                         ::testing::Values(DecodeFault::kKilled, DecodeFault::kStopped),
                         [](const ::testing::TestParamInfo<DecodeFault>& info) {
                           return info.param == DecodeFault::kKilled ? "Killed" : "Stopped";
                         });

// A prefill worker with another KV geometry refuses before writing anything; the request
// prefills locally and nothing is quarantined.
TEST(OffloadFaultTest, BlockSizeMismatchIsRefusedBeforeWritingAndPrefillsLocally) {
  auto cluster = LocalCluster::Start(OffloadCluster({"--block_size=32"}));
  ASSERT_NE(cluster, nullptr);
  GreedyReference reference;
  std::mt19937 rng(14);
  const std::vector<int32_t> prompt = reference.RandomPrompt(rng, 200);
  const auto out =
      client::CallGenerate(cluster->channel(), client::MakeRequest(prompt, 6), absl::Seconds(60));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens, reference.Generate(prompt, 6));
  EXPECT_NE(out.result.placement().mode(), v1::PLACEMENT_MODE_OFFLOAD)
      << out.result.placement().DebugString();
  ExpectClusterAtBaseline(*cluster);
}

}  // namespace
}  // namespace pdserve::testing
