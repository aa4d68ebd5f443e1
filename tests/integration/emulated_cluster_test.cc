// A cluster of emulated workers (--backend=emulated: the real router, scheduler, paged KV,
// prefix cache, offloads and UCX transfers, with the forward pass replaced by a profile's
// modelled time): offloaded, local and prefix-cached prefills give the emulated model's own
// tokens (the KV that crossed the transport carries the prompt exactly), no request is faster
// than its modelled prefill, the workers end at baseline, and bad flags are refused at start
// naming the flag.

#include <fstream>
#include <random>

#include "absl/strings/match.h"
#include "common/perf_profile.h"
#include "gtest/gtest.h"
#include "tests/integration/fault_check.h"
#include "tests/router/cluster_fixture.h"
#include "tests/testing/greedy_reference.h"
#include "tests/testing/test_models.h"
#include "tools/client/generation_client.h"

namespace pdserve {
namespace {

using testing::ClusterOptions;
using testing::LocalCluster;

// Slow enough that the modelled times dominate this machine's own costs; the pool matches the
// fixture's --num_blocks (a profile and flags that disagree are refused, as tested below).
constexpr char kProfile[] = R"({
  "description": "emulated cluster test",
  "step": {"intercept_ms": 3, "per_decode_ms": 0.2, "per_prefill_token_ms": 0.05,
           "per_attention_ms": 1e-5, "per_prefill_attention_ms": 1e-6},
  "prefill": {"overhead_ms": 2, "per_token_ms": 0.04, "per_token_squared_ms": 1e-6},
  "transfer": {"latency_ms": 0.5, "bytes_per_ms": 2e6},
  "cluster": {"num_layers": 8, "num_kv_heads": 8, "head_dim": 128, "dtype": "bf16",
              "block_size": 16, "kv_blocks": 400, "prefill_kv_blocks": 256}
})";

std::string WriteProfile() {
  const std::string path = ::testing::TempDir() + "/emulated_cluster_profile.json";
  std::ofstream(path) << kProfile;
  return path;
}

v1::GenerateRequest Request(const std::vector<int32_t>& prompt, int max_tokens) {
  v1::GenerateRequest r = client::MakeRequest(prompt, max_tokens);
  r.mutable_sampling()->set_ignore_eos(true);
  return r;
}

TEST(EmulatedClusterTest, OffloadedLocalAndCachedPrefillsGiveTheModelsTokensInTheModelledTime) {
  const std::string profile_path = WriteProfile();
  const PerfProfile profile = *ParsePerfProfile(kProfile);
  const std::vector<std::string> emulated = {"--backend=emulated", "--profile=" + profile_path};
  auto cluster = LocalCluster::Start(
      ClusterOptions{.router_flags = {"--policy=length_threshold", "--length_threshold=256"},
                     .decode_flags = emulated,
                     .prefill_flags = emulated});
  ASSERT_NE(cluster, nullptr);
  engine::EngineOptions options;
  options.backend = "emulated";
  options.emulated.profile_path = profile_path;
  pdserve::testing::GreedyReference reference("tiny", options);
  std::mt19937 rng(5);
  const std::vector<int32_t> long_prompt = reference.RandomPrompt(rng, 700);
  const std::vector<int32_t> short_prompt = reference.RandomPrompt(rng, 90);

  // Offloaded: the prefill worker's KV crossed the transport into the decode worker's pool.
  auto offloaded =
      client::CallGenerate(cluster->channel(), Request(long_prompt, 12), absl::Seconds(60));
  ASSERT_TRUE(offloaded.status.ok()) << offloaded.status.error_message();
  EXPECT_EQ(offloaded.result.placement().mode(), v1::PLACEMENT_MODE_OFFLOAD)
      << offloaded.result.placement().DebugString();
  EXPECT_FALSE(offloaded.result.placement().fell_back_to_local());
  EXPECT_EQ(offloaded.tokens, reference.Generate(long_prompt, 12));
  const double prefill_ms = profile.timing.PrefillBatchMs(std::vector<PrefillPiece>{{700, 0}});
  EXPECT_GE(offloaded.result.timings().ttft_ms(), prefill_ms);
  EXPECT_GE(offloaded.result.timings().prefill_ms(), prefill_ms * 0.999);

  // Local: chunked beside nothing, 64 tokens a step (the fixture's budget).
  auto local =
      client::CallGenerate(cluster->channel(), Request(short_prompt, 12), absl::Seconds(60));
  ASSERT_TRUE(local.status.ok()) << local.status.error_message();
  EXPECT_EQ(local.result.placement().mode(), v1::PLACEMENT_MODE_LOCAL);
  EXPECT_EQ(local.tokens, reference.Generate(short_prompt, 12));
  double local_ms = 0;
  for (int start = 0; start < 90; start += 64)
    local_ms += profile.timing.StepMs(StepWork::Chunk(std::min(64, 90 - start), start));
  EXPECT_GE(local.result.timings().ttft_ms(), local_ms);

  // The conversation's next turn: the offloaded prompt and its answer are cached on the
  // decode worker that served it; only the new tokens are computed there.
  std::vector<int32_t> follow_up = long_prompt;
  follow_up.insert(follow_up.end(), offloaded.tokens.begin(), offloaded.tokens.end());
  const std::vector<int32_t> more = reference.RandomPrompt(rng, 40);
  follow_up.insert(follow_up.end(), more.begin(), more.end());
  auto cached = client::CallGenerate(cluster->channel(), Request(follow_up, 12), absl::Seconds(60));
  ASSERT_TRUE(cached.status.ok()) << cached.status.error_message();
  EXPECT_EQ(cached.result.placement().mode(), v1::PLACEMENT_MODE_LOCAL)
      << cached.result.placement().DebugString();
  EXPECT_GE(cached.result.usage().cached_prompt_tokens(), 700u);
  EXPECT_EQ(cached.tokens, reference.Generate(follow_up, 12));

  for (auto& worker : cluster->decode()) {
    EXPECT_TRUE(LocalCluster::WaitForBaseline(*worker, absl::Seconds(10))) << worker->Log();
  }
}

// Starts a decode worker with `flags` and returns its exit status and log.
std::pair<int, std::string> RunDecodeWorker(const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"--model=" + pdserve::testing::TestModelDir("tiny"),
                                   "--ucx_transports=shm"};
  args.insert(args.end(), flags.begin(), flags.end());
  return pdserve::testing::RunUntilExit("pdserve-decode", args);
}

TEST(EmulatedClusterTest, BadFlagsAreRefusedAtStartNamingTheFlag) {
  const std::string profile = "--profile=" + WriteProfile();
  auto [code, log] = RunDecodeWorker({"--backend=emulated"});
  EXPECT_EQ(code, 2);
  EXPECT_TRUE(absl::StrContains(log, "--profile: required")) << log;
  std::tie(code, log) = RunDecodeWorker({"--backend=emulated", "--profile=/nonexistent.json"});
  EXPECT_NE(code, 0);
  EXPECT_TRUE(absl::StrContains(log, "--profile: cannot read /nonexistent.json")) << log;
  std::tie(code, log) = RunDecodeWorker({"--backend=emulated", profile, "--block_size=32"});
  EXPECT_NE(code, 0);
  EXPECT_TRUE(absl::StrContains(log, "--block_size: 32 does not fit")) << log;
  std::tie(code, log) = RunDecodeWorker({"--backend=emulated", profile, "--num_blocks=100"});
  EXPECT_NE(code, 0);
  EXPECT_TRUE(absl::StrContains(log, "--num_blocks: 100 does not fit")) << log;
  std::tie(code, log) = RunDecodeWorker({"--backend=cpu", profile});
  EXPECT_EQ(code, 2);
  EXPECT_TRUE(absl::StrContains(log, "--profile: only the emulated backend")) << log;
}

}  // namespace
}  // namespace pdserve
