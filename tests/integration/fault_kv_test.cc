// Fault suite (label "fault"): KV-cache exhaustion on a decode worker. Six concurrent greedy
// requests on a 48-block pool force preemptions; with prefix caching on, admission once
// counted the cached blocks it was about to pin as free, the next step failed ("needs 16
// blocks, its block table has 15") and every sequence in it ended with an error under an OK
// status. Every request must now complete with the tokens it gets alone, and the saturated
// worker's liveness and readiness probes keep answering SERVING.
#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/health_client.h"
#include "tests/integration/fault_check.h"
#include "tests/testing/greedy_reference.h"
#include "tools/client/generation_client.h"

namespace pdserve::testing {
namespace {

class KvExhaustionTest : public ::testing::TestWithParam<bool> {};

TEST_P(KvExhaustionTest, SixConcurrentRequestsOnA48BlockPoolAllComplete) {
  const bool prefix_caching = GetParam();
  auto cluster = LocalCluster::Start(ClusterOptions{
      .prefill_workers = 0,
      .decode_workers = 1,
      .router_flags = {"--policy=always_local"},
      .decode_flags = {"--num_blocks=48",
                       absl::StrCat("--prefix_caching=", prefix_caching ? "true" : "false")}});
  ASSERT_NE(cluster, nullptr);
  GreedyReference reference;
  std::mt19937 rng(5);
  // A shared system prompt (prefix-cache hits) and distinct questions.
  const std::vector<int32_t> system = reference.RandomPrompt(rng, 64);
  constexpr int kRequests = 6;
  constexpr int kMaxTokens = 120;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kRequests; ++i) {
    std::vector<int32_t> p = system;
    const std::vector<int32_t> question = reference.RandomPrompt(rng, 20 + 8 * i);
    p.insert(p.end(), question.begin(), question.end());
    prompts.push_back(p);
  }
  // Warm the cache with the system prompt first, as a chat service would be.
  ASSERT_TRUE(client::CallGenerate(cluster->channel(), client::MakeRequest(prompts[0], 2),
                                   absl::Seconds(60))
                  .status.ok());
  std::vector<client::GenerationOutcome> outs(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest request = client::MakeRequest(prompts[i], kMaxTokens);
      request.mutable_sampling()->set_ignore_eos(true);
      outs[i] = client::CallGenerate(cluster->channel(), request, absl::Seconds(120));
    });
  }
  // A saturated worker (pool full, preempting) is still alive and ready: saturation shows in
  // load reports and metrics, never in a probe (a liveness restart would lose every stream).
  std::atomic<bool> done{false};
  std::atomic<int> probes{0};
  std::atomic<int> failed_probes{0};
  std::thread prober([&] {
    while (!done.load()) {
      for (const char* service : {"pdserve.live", "pdserve.ready"}) {
        auto state = CheckHealth(cluster->decode()[0]->grpc_address(), absl::Seconds(2),
                                 GrpcSecurity(), service);
        ++probes;
        if (!state.ok() || *state != HealthState::kServing) ++failed_probes;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  for (auto& t : threads) t.join();
  done.store(true);
  prober.join();
  EXPECT_GT(probes.load(), 0);
  EXPECT_EQ(failed_probes.load(), 0) << "of " << probes.load() << " probes";
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE(absl::StrCat("request ", i));
    ASSERT_TRUE(outs[i].status.ok()) << outs[i].status.error_message();
    ASSERT_TRUE(outs[i].has_result);
    EXPECT_EQ(outs[i].result.finish_reason(), v1::FINISH_REASON_LENGTH)
        << outs[i].result.DebugString();
    EXPECT_EQ(outs[i].tokens.size(), static_cast<size_t>(kMaxTokens));
    // Recomputed after preemption or not, greedy tokens are what the request gets alone (the
    // reference stops at an end-of-sequence token; the request ignores it).
    const std::vector<int32_t> alone = reference.Generate(prompts[i], kMaxTokens);
    ASSERT_FALSE(alone.empty());
    EXPECT_EQ(std::vector<int32_t>(outs[i].tokens.begin(), outs[i].tokens.begin() + alone.size()),
              alone);
  }
  // The pool was too small for all six at once: some were preempted and recomputed.
  const v1::DecodeStats stats = LocalCluster::DecodeStats(*cluster->decode()[0]);
  EXPECT_GT(stats.preemptions_total(), 0u) << stats.DebugString();
  ExpectClusterAtBaseline(*cluster);
}

INSTANTIATE_TEST_SUITE_P(PrefixCaching, KvExhaustionTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "PrefixCachingOn" : "PrefixCachingOff";
                         });

}  // namespace
}  // namespace pdserve::testing
