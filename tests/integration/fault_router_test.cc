// Fault suite (label "fault"): the router under load. Hundreds of concurrent streams with
// random cancellations once aborted the router ("pure virtual method called": a read started
// on a downstream call gRPC had already finished); a full router must refuse at once with a
// retry-after hint and lose nothing. Every scenario ends with the shared baseline check.
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>

#include "absl/strings/match.h"
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
LoadResult RunConcurrentStreams(const std::shared_ptr<grpc::Channel>& channel, int streams,
                                double cancel_fraction, uint32_t seed) {
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
            result.unexpected.push_back(
                absl::StrCat("stream ", i, ": ", out.tokens.size(), " tokens"));
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
  auto cluster =
      LocalCluster::Start(ClusterOptions{.router_flags = {"--testing_relay_read_delay=2ms"}});
  ASSERT_NE(cluster, nullptr);
  for (uint32_t round = 0; round < 2; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    const LoadResult r = RunConcurrentStreams(cluster->channel(), 300, 0.25, 1000 * (round + 1));
    EXPECT_TRUE(r.unexpected.empty())
        << r.unexpected.size() << " unexpected outcomes, first: " << r.unexpected[0];
    EXPECT_EQ(r.exhausted, 0);
    EXPECT_GT(r.ok, 150);
    ASSERT_TRUE(cluster->router().running()) << cluster->router().Log();
  }
  ExpectClusterAtBaseline(*cluster);
}

// The stress test the ThreadSanitizer build runs (scripts/test.sh): hundreds of streams with
// random cancellations while a decode worker is killed. Streams on the killed worker end
// UNAVAILABLE; nothing else is lost. PDSERVE_STRESS_STREAMS sizes it (default 300).
TEST(RouterFaultTest, StressStreamsWithCancellationsAndAKilledDecodeWorker) {
  const char* env = std::getenv("PDSERVE_STRESS_STREAMS");
  const int streams = env != nullptr ? std::max(10, std::atoi(env)) : 300;
  auto cluster = LocalCluster::Start(ClusterOptions{.prefill_workers = 1, .decode_workers = 3});
  ASSERT_NE(cluster, nullptr);
  LoadResult result;
  std::thread load([&] { result = RunConcurrentStreams(cluster->channel(), streams, 0.25, 4242); });
  // Killed while the router relays streams to it.
  const std::string victim = cluster->decode()[2]->grpc_address();
  EXPECT_TRUE(cluster->WaitForStatus([&](const v1::ClusterStatus& s) {
    for (const v1::WorkerStatus& w : s.workers()) {
      if (w.registration().grpc_address() == victim && w.router_in_flight() > 0) return true;
    }
    return false;
  }));
  cluster->decode()[2]->Kill();
  load.join();
  cluster->decode().pop_back();
  // UNAVAILABLE (code 14) is what a stream on the killed worker gets.
  std::vector<std::string> other;
  for (const std::string& u : result.unexpected) {
    if (!absl::StrContains(u, ": 14 ")) other.push_back(u);
  }
  EXPECT_TRUE(other.empty()) << other.size() << " unexpected outcomes, first: " << other[0];
  EXPECT_GT(result.ok, streams / 3);
  ASSERT_TRUE(cluster->WaitForWorkers(2, 1, absl::Seconds(10)));
  ExpectClusterAtBaseline(*cluster, absl::Seconds(60));
}

// The router restarted on its address: the workers register again by themselves, requests
// in flight at the crash end UNAVAILABLE, and new ones are served.
TEST(RouterFaultTest, RouterRestartedAtItsAddressGetsItsWorkersBack) {
  auto cluster = LocalCluster::Start(ClusterOptions{});
  ASSERT_NE(cluster, nullptr);
  v1::GenerateRequest long_request = client::MakeRequest({1, 2, 3}, 3000);
  long_request.mutable_sampling()->set_ignore_eos(true);
  client::GenerationOutcome in_flight;
  std::thread call([&] {
    in_flight = client::CallGenerate(cluster->channel(), long_request, absl::Seconds(60));
  });
  ASSERT_TRUE(
      cluster->WaitForStatus([](const v1::ClusterStatus& s) { return s.in_flight() >= 1; }));
  ASSERT_TRUE(cluster->RestartRouter());
  call.join();
  EXPECT_EQ(in_flight.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << in_flight.status.error_message();
  ASSERT_TRUE(cluster->WaitForWorkers(2, 1, absl::Seconds(15))) << cluster->Status().DebugString();
  const auto out = client::CallGenerate(cluster->channel(), client::MakeRequest({4, 5, 6}, 5),
                                        absl::Seconds(30));
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
  ExpectClusterAtBaseline(*cluster);
}

// A router that stops running for 6 s (SIGSTOP: a VM stall, a swap storm) used to remove
// every healthy worker on resume (its sweeper ran before the queued load reports were read)
// and end every in-flight stream UNAVAILABLE. The stall is now not held against the workers:
// they stay registered, and the streams their decode workers kept serving complete whole.
TEST(RouterFaultTest, APausedRouterKeepsItsWorkersAndTheirStreams) {
  auto cluster = LocalCluster::Start(ClusterOptions{});
  ASSERT_NE(cluster, nullptr);
  GreedyReference reference;
  constexpr int kStreams = 4;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<client::GenerationOutcome> outs(kStreams);
  std::vector<std::thread> calls;
  for (int i = 0; i < kStreams; ++i) {
    prompts.push_back({1, 2, 3, static_cast<int32_t>(10 + i)});
    calls.emplace_back([&, i] {
      v1::GenerateRequest request = client::MakeRequest(prompts[i], 1500);
      request.mutable_sampling()->set_ignore_eos(true);
      outs[i] = client::CallGenerate(cluster->channel(), request, absl::Seconds(120));
    });
  }
  ASSERT_TRUE(cluster->WaitForStatus(
      [](const v1::ClusterStatus& s) { return s.in_flight() >= static_cast<uint32_t>(kStreams); }));
  ASSERT_EQ(kill(cluster->router().pid(), SIGSTOP), 0);
  absl::SleepFor(absl::Seconds(6));  // Three report timeouts (2 s) without the router.
  ASSERT_EQ(kill(cluster->router().pid(), SIGCONT), 0);
  for (auto& c : calls) c.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << "stream " << i << ": " << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, reference.Generate(prompts[i], 1500)) << "stream " << i;
  }
  const v1::ClusterStatus status = cluster->Status();
  int decode = 0, prefill = 0;
  for (const v1::WorkerStatus& w : status.workers())
    (w.registration().role() == v1::WORKER_ROLE_DECODE ? decode : prefill) += 1;
  EXPECT_EQ(decode, 2) << status.DebugString();
  EXPECT_EQ(prefill, 1) << status.DebugString();
  EXPECT_TRUE(absl::StrContains(cluster->router().Log(), "not counted as its workers' silence"))
      << cluster->router().Log();
  ExpectClusterAtBaseline(*cluster);
}

// Three times what the router admits, at once: the excess is refused at once with
// RESOURCE_EXHAUSTED and a retry-after trailer; everything admitted completes.
TEST(RouterFaultTest, ThreeTimesOverloadIsRefusedAtOnceAndLosesNothing) {
  auto cluster = LocalCluster::Start(ClusterOptions{.router_flags = {"--max_in_flight=40"}});
  ASSERT_NE(cluster, nullptr);
  const LoadResult r = RunConcurrentStreams(cluster->channel(), 120, 0.0, 77);
  EXPECT_TRUE(r.unexpected.empty())
      << r.unexpected.size() << " unexpected outcomes, first: " << r.unexpected[0];
  EXPECT_GT(r.exhausted, 0);
  EXPECT_GE(r.ok, 40);
  EXPECT_EQ(r.ok + r.exhausted, 120);
  ExpectClusterAtBaseline(*cluster);
}

}  // namespace
}  // namespace pdserve::testing
