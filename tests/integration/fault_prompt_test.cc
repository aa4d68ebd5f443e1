// Fault suite (label "fault"): hostile prompt sizes at the router. Two concurrent 30 MiB text
// prompts once took the cluster offline for 11 s (tokenized on gRPC's threads before any
// length check, the registry streams starved and every worker was dropped), and rejected
// prompts grew the router's memory for good (a word cache bounded in entries, not bytes).
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/process_memory.h"
#include "gtest/gtest.h"
#include "tests/integration/fault_check.h"
#include "tools/client/generation_client.h"

namespace pdserve::testing {
namespace {

// Text of `bytes` made of unique random "words" of `word_bytes` letters.
std::string RandomWords(std::mt19937& rng, size_t bytes, int word_bytes) {
  std::string text;
  text.reserve(bytes);
  while (text.size() < bytes) {
    text.push_back(' ');
    for (int i = 0; i < word_bytes; ++i) text.push_back(static_cast<char>('a' + rng() % 26));
  }
  return text;
}

// While alive, checks every 100 ms that the router still lists every worker.
class RegistryWatch {
 public:
  RegistryWatch(LocalCluster* cluster, int workers)
      : thread_([this, cluster, workers] {
          while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
            if (cluster->Status().workers_size() != workers) ++dropped_;
          }
        }) {}
  ~RegistryWatch() { Stop(); }
  int Stop() {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (thread_.joinable()) thread_.join();
    return dropped_;
  }

 private:
  absl::Notification stop_;
  std::atomic<int> dropped_{0};
  std::thread thread_;
};

TEST(PromptFaultTest, TwoConcurrent30MiBTextPromptsAreRefusedAtOnceAndTheClusterStaysUp) {
  auto cluster = LocalCluster::Start(ClusterOptions{});
  ASSERT_NE(cluster, nullptr);
  std::mt19937 rng(1);
  const std::string huge = RandomWords(rng, 30 << 20, 7);
  RegistryWatch watch(cluster.get(), 3);
  std::vector<client::GenerationOutcome> outs(2);
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      outs[i] = client::CallGenerate(cluster->channel(), client::MakeRequest({}, 8, 0, huge),
                                     absl::Seconds(60));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (const auto& out : outs) {
    EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << out.status.error_message();
    EXPECT_TRUE(absl::StrContains(out.status.error_message(), "prompt.text"))
        << out.status.error_message();
    EXPECT_TRUE(absl::StrContains(out.status.error_message(), "--max_prompt_bytes"))
        << out.status.error_message();
  }
  EXPECT_EQ(watch.Stop(), 0) << "the router dropped workers";
  const auto ok = client::CallGenerate(
      cluster->channel(), client::MakeRequest({}, 4, 0, "hello there"), absl::Seconds(30));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  ExpectClusterAtBaseline(*cluster);
}

// With a limit high enough that they are tokenized (and then refused as longer than the
// context), big prompts are tokenized off gRPC's threads: the registry keeps every worker,
// other requests are served meanwhile, and the router's memory does not grow with each one.
TEST(PromptFaultTest, BigPromptsTokenizedAndRefusedNeitherStarveTheRegistryNorGrowTheRouter) {
  auto cluster =
      LocalCluster::Start(ClusterOptions{.router_flags = {"--max_prompt_bytes=8000000"}});
  ASSERT_NE(cluster, nullptr);
  std::mt19937 rng(2);
  RegistryWatch watch(cluster.get(), 3);
  std::atomic<bool> loading{true};
  std::atomic<int> served{0};
  std::atomic<int> failed{0};
  std::thread small([&] {
    while (loading.load()) {
      const auto out = client::CallGenerate(
          cluster->channel(), client::MakeRequest({1, 2, 3, 4}, 2), absl::Seconds(30));
      (out.status.ok() ? served : failed)++;
    }
  });
  int64_t rss_after_warmup = 0;
  for (int round = 0; round < 8; ++round) {
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      // Long words, each one new: what once filled the word cache without bound.
      threads.emplace_back([&, text = RandomWords(rng, 7 << 20, 2000)] {
        const auto out = client::CallGenerate(
            cluster->channel(), client::MakeRequest({}, 8, 0, text), absl::Seconds(120));
        EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
            << out.status.error_message();
      });
    }
    for (auto& t : threads) t.join();
    // The allocator keeps what the first rounds freed; later rounds must not add to it.
    if (round == 2) rss_after_warmup = ResidentSetBytes(cluster->router().pid());
  }
  loading = false;
  small.join();
  const int64_t rss_after_all = ResidentSetBytes(cluster->router().pid());
  EXPECT_EQ(watch.Stop(), 0) << "the router dropped workers";
  EXPECT_GT(served.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  // Measured: within +-60 MB of a plateau now; before the fix, +85 MB every round.
  EXPECT_LT(rss_after_all - rss_after_warmup, int64_t{128} << 20)
      << "router RSS " << rss_after_warmup << " after 3 rounds -> " << rss_after_all << " after 8";
  ExpectClusterAtBaseline(*cluster);
}

}  // namespace
}  // namespace pdserve::testing
