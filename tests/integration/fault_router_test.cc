// Fault suite (label "fault"): the router under load. Hundreds of concurrent streams with
// random cancellations once aborted the router ("pure virtual method called": a read started
// on a downstream call gRPC had already finished); a full router must refuse at once with a
// retry-after hint and lose nothing. Every scenario ends with the shared baseline check.
#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/integration/fault_check.h"
#include "tests/testing/greedy_reference.h"
#include "tools/client/generation_client.h"

namespace pdserve::testing {
namespace {

struct LoadResult {
  int ok = 0;
  int cancelled = 0;
  int exhausted = 0;
  std::vector<std::string> unexpected;
};

// `streams` concurrent Generate calls of short random prompts; about `cancel_fraction` of
// them are cancelled at a random moment within their first 300 ms.
LoadResult RunConcurrentStreams(const std::shared_ptr<grpc::Channel>& channel, int streams, double cancel_fraction,
                                uint32_t seed) {
  LoadResult result;
  absl::Mutex mu;
  std::vector<std::thread> threads;
  threads.reserve(streams);
  for (int i = 0; i < streams; ++i) {
    threads.emplace_back([&, i] {
      std::mt19937 rng(seed + i);
      std::vector<int32_t> prompt(5 + rng() % 40);
      for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 200 + 3);
      v1::GenerateRequest request = client::MakeRequest(prompt, 4 + rng() % 20);
      request.mutable_sampling()->set_ignore_eos(true);
      const bool cancel = std::uniform_real_distribution<double>(0, 1)(rng) < cancel_fraction;
      const absl::Duration cancel_after = absl::Milliseconds(rng() % 300);
      client::CallHandle handle;
      absl::Notification done;
      std::thread canceller;
      if (cancel) {
        canceller = std::thread([&] {
          if (!done.WaitForNotificationWithTimeout(cancel_after)) handle.Cancel();
        });
      }
      const client::GenerationOutcome out =
          client::CallGenerate(channel, request, absl::Seconds(120), nullptr, &handle);
      done.Notify();
      if (canceller.joinable()) canceller.join();
      absl::MutexLock lock(&mu);
      switch (out.status.error_code()) {
        case grpc::StatusCode::OK:
          ++result.ok;
          if (out.tokens.size() != static_cast<size_t>(request.sampling().max_tokens())) {
            result.unexpected.push_back(absl::StrCat("stream ", i, ": ", out.tokens.size(), " tokens"));
          }
          break;
        case grpc::StatusCode::CANCELLED:
          if (cancel) {
            ++result.cancelled;
            break;
          }
          [[fallthrough]];
        case grpc::StatusCode::RESOURCE_EXHAUSTED:
          if (out.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
            ++result.exhausted;
            break;
          }
          [[fallthrough]];
        default:
          result.unexpected.push_back(absl::StrCat("stream ", i, ": ", out.status.error_code(), " ",
                                                   out.status.error_message()));
      }
    });
  }
  for (auto& t : threads) t.join();
  return result;
}

TEST(RouterFaultTest, ThreeHundredConcurrentStreamsWithCancellationsKeepTheRouterUp) {
  // Reads are started 2 ms after the decision to start them, so that a decode worker's
  // stream often ends in between: the window in which the router used to abort.
  auto cluster = LocalCluster::Start(ClusterOptions{.router_flags = {"--testing_relay_read_delay=2ms"}});
  ASSERT_NE(cluster, nullptr);
  for (uint32_t round = 0; round < 2; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    const LoadResult r = RunConcurrentStreams(cluster->channel(), 300, 0.25, 1000 * (round + 1));
    EXPECT_TRUE(r.unexpected.empty()) << r.unexpected.size() << " unexpected outcomes, first: " << r.unexpected[0];
    EXPECT_EQ(r.exhausted, 0);
    EXPECT_GT(r.ok, 150);
    ASSERT_TRUE(cluster->router().running()) << cluster->router().Log();
  }
  ExpectClusterAtBaseline(*cluster);
}

// Three times what the router admits, at once: the excess is refused at once with
// RESOURCE_EXHAUSTED and a retry-after trailer; everything admitted completes.
TEST(RouterFaultTest, ThreeTimesOverloadIsRefusedAtOnceAndLosesNothing) {
  auto cluster = LocalCluster::Start(ClusterOptions{.router_flags = {"--max_in_flight=40"}});
  ASSERT_NE(cluster, nullptr);
  const LoadResult r = RunConcurrentStreams(cluster->channel(), 120, 0.0, 77);
  EXPECT_TRUE(r.unexpected.empty()) << r.unexpected.size() << " unexpected outcomes, first: " << r.unexpected[0];
  EXPECT_GT(r.exhausted, 0);
  EXPECT_GE(r.ok, 40);
  EXPECT_EQ(r.ok + r.exhausted, 120);
  ExpectClusterAtBaseline(*cluster);
}

}  // namespace
}  // namespace pdserve::testing
