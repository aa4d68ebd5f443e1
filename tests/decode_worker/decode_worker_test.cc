// The decode worker as a real process: concurrent streams produce exactly the tokens a
// sequence alone produces, cancellation frees blocks, oversized prompts and bad input are
// rejected with the field and the limit, a full queue is RESOURCE_EXHAUSTED, and SIGTERM
// drains running requests before a clean exit.
#include <signal.h>
#include <sys/wait.h>

#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/generator.h"
#include "engine/model_loader.h"
#include "gtest/gtest.h"
#include "pdserve/v1/decode.grpc.pb.h"
#include "server/child_process.h"
#include "tests/testing/decode_stats.h"
#include "tests/testing/http_client.h"
#include "tests/testing/listening_sockets.h"
#include "tests/testing/test_models.h"
#include "tools/client/generation_client.h"

namespace pdserve::decode {
namespace {

using pdserve::ChildOptions;
using pdserve::ChildProcess;

std::unique_ptr<ChildProcess> StartDecode(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--model=" + pdserve::testing::TestModelDir("tiny"),
                                   "--threads=1", "--kv_transport=none", "--drain_timeout=10s"};
  for (auto& e : extra) args.push_back(e);
  auto child = ChildProcess::Start(ChildOptions{.binary = "pdserve-decode", .args = args});
  EXPECT_TRUE(child.ok()) << child.status();
  EXPECT_TRUE((*child)->WaitHealthy(absl::Seconds(30)).ok()) << (*child)->Log();
  return *std::move(child);
}

v1::DecodeRequest Request(const std::vector<int32_t>& prompt, int max_tokens) {
  v1::DecodeRequest r;
  *r.mutable_request() = client::MakeRequest(prompt, max_tokens);
  return r;
}

class DecodeWorkerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    worker_ = StartDecode({"--max_num_batched_tokens=128", "--num_blocks=600"}).release();
  }
  static void TearDownTestSuite() {
    delete worker_;
    worker_ = nullptr;
  }
  static ChildProcess* worker_;
};
ChildProcess* DecodeWorkerTest::worker_ = nullptr;

TEST_F(DecodeWorkerTest, ConcurrentStreamsMatchSequencesGeneratedAlone) {
  auto loaded = engine::LoadModel(pdserve::testing::TestModelDir("tiny"),
                                  engine::EngineOptions{.num_threads = 1});
  ASSERT_TRUE(loaded.ok());
  const int vocab = loaded->model->config().vocab_size;
  std::mt19937 rng(1234);
  constexpr int kStreams = 32;
  std::vector<std::vector<int32_t>> prompts(kStreams);
  std::vector<int> max_tokens(kStreams);
  std::vector<std::vector<int32_t>> expected(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    prompts[i].resize(1 + rng() % 200);
    for (auto& t : prompts[i]) t = static_cast<int32_t>(rng() % vocab);
    max_tokens[i] = 5 + static_cast<int>(rng() % 36);
    text::SamplingConfig sampling;
    sampling.max_tokens = max_tokens[i];
    sampling.temperature = 0;
    auto alone = engine::GenerateSingle(*loaded->model, loaded->tokenizer.get(), prompts[i],
                                        sampling, loaded->eos_token_ids, engine::GenerateOptions{});
    ASSERT_TRUE(alone.ok());
    expected[i] = alone->tokens;
  }
  auto channel = client::MakeChannel(worker_->grpc_address(), GrpcSecurity());
  std::vector<client::GenerationOutcome> outcomes(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      outcomes[i] =
          client::CallDecode(channel, Request(prompts[i], max_tokens[i]), absl::Seconds(120));
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(outcomes[i].status.ok()) << i << ": " << outcomes[i].status.error_message();
    EXPECT_EQ(outcomes[i].tokens, expected[i])
        << "stream " << i << " (prompt " << prompts[i].size() << " tokens)";
    ASSERT_TRUE(outcomes[i].has_result);
    EXPECT_EQ(outcomes[i].result.usage().prompt_tokens(), prompts[i].size());
    EXPECT_EQ(outcomes[i].result.usage().completion_tokens(), expected[i].size());
    EXPECT_GT(outcomes[i].result.timings().ttft_ms(), 0);
    EXPECT_EQ(outcomes[i].result.placement().mode(), v1::PLACEMENT_MODE_LOCAL);
  }
  EXPECT_TRUE(testing::WaitForDecodeBaseline(worker_->grpc_address(), absl::Seconds(5)));
}

TEST_F(DecodeWorkerTest, MatchesThePdserveGenerateBinary) {
  auto out = ChildProcess::Start(ChildOptions{
      .binary = "pdserve-generate",
      .args = {"--model=" + pdserve::testing::TestModelDir("tiny"), "--prompt=Hello there, llama",
               "--max_tokens=20", "--print_ids", "--threads=1"},
      .expect_serving_info = false});
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE((*out)->WaitExit(absl::Seconds(60)).has_value());
  const std::string log = (*out)->Log();
  const size_t at = log.find("ids: ");
  ASSERT_NE(at, std::string::npos) << log;
  std::vector<int32_t> expected;
  for (absl::string_view id :
       absl::StrSplit(log.substr(at + 5, log.find('\n', at) - at - 5), ',')) {
    int v;
    ASSERT_TRUE(absl::SimpleAtoi(id, &v));
    expected.push_back(v);
  }
  v1::DecodeRequest r;
  *r.mutable_request() = client::MakeRequest({}, 20, 0.0f, "Hello there, llama");
  auto outcome = client::CallDecode(client::MakeChannel(worker_->grpc_address(), GrpcSecurity()), r,
                                    absl::Seconds(30));
  ASSERT_TRUE(outcome.status.ok()) << outcome.status.error_message();
  EXPECT_EQ(outcome.tokens, expected);
}

TEST_F(DecodeWorkerTest, CancellationMidStreamFreesBlocks) {
  const std::string address = worker_->grpc_address();
  v1::DecodeRequest r = Request(std::vector<int32_t>(100, 7), 3000);
  r.mutable_request()->mutable_sampling()->set_ignore_eos(true);
  client::CallHandle handle;
  int seen = 0;  // The message callback runs on the calling thread.
  auto outcome = client::CallDecode(
      client::MakeChannel(address, GrpcSecurity()), r, absl::Seconds(60),
      [&](const v1::GenerateResponse&) {
        if (++seen == 5) handle.Cancel();
      },
      &handle);
  EXPECT_EQ(outcome.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(outcome.tokens.size(), 3000u);
  EXPECT_TRUE(testing::WaitForDecodeBaseline(address, absl::Seconds(5))) << "blocks were not freed";
  auto metrics = pdserve::testing::HttpGet(worker_->metrics_address(), "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(metrics->body.find("pdserve_request_success_total{finished_reason=\"cancelled\""),
            std::string::npos);
}

TEST_F(DecodeWorkerTest, MetricsFollowTheVllmSchemaWithThePdservePrefix) {
  // Traffic first, so histograms have observations.
  auto outcome = client::CallDecode(client::MakeChannel(worker_->grpc_address(), GrpcSecurity()),
                                    Request({5, 6, 7}, 4), absl::Seconds(30));
  ASSERT_TRUE(outcome.status.ok());
  auto metrics = pdserve::testing::HttpGet(worker_->metrics_address(), "/metrics");
  ASSERT_TRUE(metrics.ok());
  for (const char* name :
       {"pdserve_time_to_first_token_seconds_bucket", "pdserve_inter_token_latency_seconds_bucket",
        "pdserve_e2e_request_latency_seconds_bucket", "pdserve_request_queue_time_seconds_bucket",
        "pdserve_num_requests_running", "pdserve_num_requests_waiting",
        "pdserve_kv_cache_usage_perc", "pdserve_prefix_cache_queries_total",
        "pdserve_prefix_cache_hits_total", "pdserve_num_preemptions_total",
        "pdserve_step_duration_seconds_bucket{kind=\"decode_only\"",
        "pdserve_step_batch_sequences_bucket", "pdserve_generation_tokens_total",
        "pdserve_request_success_total{finished_reason=\"length\"",
        // The engine backend and its instruction set ride on the build info.
        "pdserve_build_info{backend=\"cpu\",component=\"decode\",instruction_set=\""}) {
    EXPECT_NE(metrics->body.find(name), std::string::npos) << name;
  }
}

TEST_F(DecodeWorkerTest, BadInputIsInvalidArgumentNamingFieldAndLimit) {
  auto channel = client::MakeChannel(worker_->grpc_address(), GrpcSecurity());
  struct Case {
    std::function<void(v1::DecodeRequest*)> edit;
    grpc::StatusCode code;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {[](v1::DecodeRequest* r) { r->mutable_request()->clear_prompt(); },
       grpc::StatusCode::INVALID_ARGUMENT, "prompt"},
      {[](v1::DecodeRequest* r) { r->mutable_request()->set_text(""); },
       grpc::StatusCode::INVALID_ARGUMENT, "prompt.text: must not be empty"},
      {[](v1::DecodeRequest* r) { r->mutable_request()->mutable_sampling()->set_temperature(-1); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.temperature: -1 must be >= 0"},
      {[](v1::DecodeRequest* r) { r->mutable_request()->mutable_sampling()->set_top_p(0); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.top_p: 0 is outside (0, 1]"},
      {[](v1::DecodeRequest* r) { r->mutable_request()->mutable_sampling()->set_top_p(1.5); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.top_p: 1.5 is outside (0, 1]"},
      {[](v1::DecodeRequest* r) { r->mutable_request()->mutable_sampling()->set_max_tokens(0); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.max_tokens: 0 must be >= 1"},
      {[](v1::DecodeRequest* r) { r->mutable_request()->mutable_sampling()->set_max_tokens(5000); },
       grpc::StatusCode::INVALID_ARGUMENT, "exceeds the model's context of 4096"},
      {[](v1::DecodeRequest* r) { r->mutable_request()->mutable_token_ids()->set_ids(1, 5000); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "prompt.token_ids[1]: token id 5000 is outside [0, 1024)"},
      {[](v1::DecodeRequest* r) { r->mutable_request()->set_model("gpt-9"); },
       grpc::StatusCode::NOT_FOUND, "gpt-9"},
      {[](v1::DecodeRequest* r) { r->mutable_request()->set_request_id(std::string(200, 'x')); },
       grpc::StatusCode::INVALID_ARGUMENT, "request_id: 200 bytes, at most 128"},
  };
  for (const Case& c : cases) {
    v1::DecodeRequest r = Request({1, 2, 3}, 4);
    c.edit(&r);
    auto outcome = client::CallDecode(channel, r, absl::Seconds(10));
    EXPECT_EQ(outcome.status.error_code(), c.code)
        << c.needle << ": " << outcome.status.error_message();
    EXPECT_NE(outcome.status.error_message().find(c.needle), std::string::npos)
        << outcome.status.error_message();
    EXPECT_TRUE(outcome.tokens.empty());
  }
}

TEST(DecodeWorkerLimitsTest, OversizedPromptIsRejectedWhileSmallerOnesProceed) {
  // 20 blocks of 16 tokens: 319 tokens of KV per sequence at most.
  auto worker = StartDecode({"--num_blocks=20"});
  auto channel = client::MakeChannel(worker->grpc_address(), GrpcSecurity());
  client::GenerationOutcome small, big;
  std::thread t1([&] {
    small = client::CallDecode(channel, Request(std::vector<int32_t>(50, 3), 8), absl::Seconds(30));
  });
  std::thread t2([&] {
    big = client::CallDecode(channel, Request(std::vector<int32_t>(400, 3), 8), absl::Seconds(30));
  });
  t1.join();
  t2.join();
  EXPECT_TRUE(small.status.ok()) << small.status.error_message();
  EXPECT_EQ(small.tokens.size(), 8u);
  EXPECT_EQ(big.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(big.status.error_message().find("pool holds (319 tokens)"), std::string::npos)
      << big.status.error_message();
}

TEST(DecodeWorkerLimitsTest, FullWaitingQueueIsResourceExhausted) {
  auto worker = StartDecode({"--max_num_seqs=1", "--max_waiting=1", "--retry_after=700ms"});
  auto channel = client::MakeChannel(worker->grpc_address(), GrpcSecurity());
  v1::DecodeRequest slow = Request(std::vector<int32_t>(20, 5), 1500);
  slow.mutable_request()->mutable_sampling()->set_ignore_eos(true);
  client::GenerationOutcome running, queued;
  std::thread t1([&] { running = client::CallDecode(channel, slow, absl::Seconds(60)); });
  // Wait until it runs, then fill the one waiting slot.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (testing::DecodeStatsOf(worker->grpc_address()).running() == 0 && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(5));
  std::thread t2([&] {
    queued = client::CallDecode(channel, Request({1, 2}, 2), absl::Seconds(60));
  });
  while (testing::DecodeStatsOf(worker->grpc_address()).waiting() == 0 && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(5));
  const absl::Time start = absl::Now();
  auto rejected = client::CallDecode(channel, Request({1, 2}, 2), absl::Seconds(10));
  EXPECT_EQ(rejected.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << rejected.status.error_message();
  EXPECT_NE(rejected.status.error_message().find("retry after 700 ms"), std::string::npos);
  EXPECT_EQ(rejected.retry_after, absl::Milliseconds(700));  // The configured hint, as a trailer.
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));          // Quickly, not after waiting.
  t1.join();
  t2.join();
  EXPECT_TRUE(running.status.ok());
  EXPECT_TRUE(queued.status.ok());
}

// A pool too small to run is a startup error naming the flag that sized it (--num_blocks=1
// used to blame --kv_cache_bytes).
TEST(DecodeWorkerLimitsTest, TooSmallAPoolNamesTheFlagThatSizedIt) {
  for (const auto& [flag, named] : std::vector<std::pair<std::string, std::string>>{
           {"--num_blocks=1", "--num_blocks: 1 is fewer than 2"},
           {"--kv_cache_bytes=1000", "--kv_cache_bytes"}}) {
    std::vector<std::string> args = {"--model=" + pdserve::testing::TestModelDir("tiny"),
                                     "--threads=1", "--kv_transport=none", flag};
    auto child = ChildProcess::Start(
        ChildOptions{.binary = "pdserve-decode", .args = args, .expect_serving_info = false});
    ASSERT_TRUE(child.ok());
    auto status = (*child)->WaitExit(absl::Seconds(30));
    ASSERT_TRUE(status.has_value());
    EXPECT_FALSE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
    EXPECT_TRUE(absl::StrContains((*child)->Log(), named)) << flag << ":\n" << (*child)->Log();
  }
}

// The model's weight bytes as a decode worker stored them, from the message --memory_bytes=1
// gets (the budget cannot even hold the weights). 0 when the message is not found.
int64_t WeightBytesFromRefusal(const std::string& weight_dtype) {
  auto child = ChildProcess::Start(ChildOptions{
      .binary = "pdserve-decode",
      .args = {"--model=" + pdserve::testing::TestModelDir("tiny"), "--threads=1",
               "--kv_transport=none", "--weight_dtype=" + weight_dtype, "--memory_bytes=1"},
      .expect_serving_info = false});
  if (!child.ok()) return 0;
  if (!(*child)->WaitExit(absl::Seconds(30)).has_value()) return 0;
  const std::string log = (*child)->Log();
  const std::string marker = "after the model's ";
  const size_t at = log.find(marker);
  int64_t bytes = 0;
  if (at == std::string::npos ||
      !absl::SimpleAtoi(
          log.substr(at + marker.size(), log.find(' ', at + marker.size()) - (at + marker.size())),
          &bytes)) {
    ADD_FAILURE() << "no weight bytes in:\n" << log;
  }
  return bytes;
}

// --memory_bytes gives the KV pool what the weights leave, counting them as stored: a budget
// that holds the tiny model's weights in bf16 with room for KV cannot hold them in f32, and
// the worker says so (the flag, what is left, what is needed); the gauges show the real bytes.
TEST(DecodeWorkerLimitsTest, MemoryBudgetCountsTheWeightsAsStored) {
  const int64_t f32_bytes = WeightBytesFromRefusal("f32");
  const int64_t bf16_bytes = WeightBytesFromRefusal("bf16");
  ASSERT_GT(f32_bytes, 0);
  ASSERT_GT(bf16_bytes, 0);
  // Half the bytes, but for the norms, which stay f32.
  EXPECT_LT(bf16_bytes, f32_bytes * 0.55);
  EXPECT_GT(bf16_bytes, f32_bytes * 0.5);
  const int64_t budget = bf16_bytes + (f32_bytes - bf16_bytes) / 2;

  auto bf16 = StartDecode({"--weight_dtype=bf16", absl::StrCat("--memory_bytes=", budget)});
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(pdserve::testing::Metric(bf16->metrics_address(), "pdserve_model_weight_bytes "),
            static_cast<double>(bf16_bytes));
  const double pool = pdserve::testing::Metric(bf16->metrics_address(), "pdserve_kv_pool_bytes ");
  EXPECT_GT(pool, 0);
  EXPECT_LE(pool, static_cast<double>(budget - bf16_bytes));
  const v1::DecodeStats stats = testing::DecodeStatsOf(bf16->grpc_address());
  EXPECT_GE(stats.blocks().total(), 2);

  auto f32 = ChildProcess::Start(
      ChildOptions{.binary = "pdserve-decode",
                   .args = {"--model=" + pdserve::testing::TestModelDir("tiny"), "--threads=1",
                            "--kv_transport=none", "--weight_dtype=f32",
                            absl::StrCat("--memory_bytes=", budget)},
                   .expect_serving_info = false});
  ASSERT_TRUE(f32.ok());
  auto status = (*f32)->WaitExit(absl::Seconds(30));
  ASSERT_TRUE(status.has_value());
  EXPECT_FALSE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  EXPECT_TRUE(
      absl::StrContains((*f32)->Log(), absl::StrCat("--memory_bytes: ", budget, " leaves -")))
      << (*f32)->Log();
  EXPECT_TRUE(absl::StrContains((*f32)->Log(), absl::StrCat("the model's ", f32_bytes, " bytes")));
}

TEST(DecodeWorkerLifecycleTest, SigtermDrainsRunningRequestsThenExits) {
  auto worker = StartDecode();
  auto channel = client::MakeChannel(worker->grpc_address(), GrpcSecurity());
  v1::DecodeRequest r = Request(std::vector<int32_t>(10, 9), 300);
  r.mutable_request()->mutable_sampling()->set_ignore_eos(true);
  client::GenerationOutcome outcome;
  std::atomic<int> messages{0};
  std::thread t([&] {
    outcome = client::CallDecode(channel, r, absl::Seconds(60), [&](const auto&) { ++messages; });
  });
  while (messages.load() < 3) absl::SleepFor(absl::Milliseconds(2));
  ::kill(worker->pid(), SIGTERM);
  t.join();
  EXPECT_TRUE(outcome.status.ok()) << outcome.status.error_message();
  EXPECT_EQ(outcome.tokens.size(), 300u);  // It finished despite the drain.
  auto exit = worker->WaitExit(absl::Seconds(20));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(WIFEXITED(*exit));
  EXPECT_EQ(WEXITSTATUS(*exit), 0) << worker->Log();
}

}  // namespace
}  // namespace pdserve::decode

namespace pdserve::decode {
namespace {

// A worker that listens on loopback keeps every listener there, UCX's TCP listener included
// (UCX alone listens on every interface it finds).
TEST(DecodeWorkerPortsTest, AWorkerOnLoopbackListensOnLoopbackOnly) {
  std::vector<std::string> flags = {"--kv_transport=ucx", "--ucx_transports=tcp"};
  // Lets a run show what happens without the restriction (e.g. --ucx_net_devices=all).
  if (const char* devices = std::getenv("PDSERVE_TEST_UCX_NET_DEVICES")) {
    flags.push_back(absl::StrCat("--ucx_net_devices=", devices));
  }
  auto worker = StartDecode(flags);
  ASSERT_NE(worker, nullptr);
  const std::vector<std::string> listening = pdserve::testing::ListeningAddresses(worker->pid());
  int others = 0;  // Listeners other than gRPC and /metrics: UCX's.
  for (const std::string& address : listening) {
    EXPECT_TRUE(absl::StartsWith(address, "127.") || absl::StartsWith(address, "[::1]") ||
                absl::StartsWith(address, "[::ffff:127."))
        << address << " is not loopback; all: " << absl::StrJoin(listening, ", ");
    if (address != worker->grpc_address() && address != worker->metrics_address()) ++others;
  }
  EXPECT_GE(others, 1) << "no UCX listener found among " << absl::StrJoin(listening, ", ");
}

}  // namespace
}  // namespace pdserve::decode
