// The router end to end with real binaries (1 router, 1 prefill worker, 2 decode workers,
// tiny model): long cold prompts next to running decodes are offloaded under cost_model and
// never under always_local; a conversation's second turn lands on the decode worker holding
// its prefix and prefills locally; a killed decode worker leaves the registry, its in-flight
// request ends UNAVAILABLE and new requests succeed on the other; unknown models are
// NOT_FOUND; bad input is INVALID_ARGUMENT before any worker is touched; overload is
// RESOURCE_EXHAUSTED at once with a retry-after hint; cancelling requests at random phases
// leaves every worker's blocks at baseline.
#include <signal.h>
#include <sys/wait.h>

#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "engine/generator.h"
#include "engine/model_loader.h"
#include "gtest/gtest.h"
#include "tests/router/cluster_fixture.h"
#include "tests/testing/greedy_reference.h"
#include "tests/testing/http_client.h"
#include "tests/testing/test_models.h"
#include "tools/client/generation_client.h"

namespace pdserve::router {
namespace {

using pdserve::testing::ClusterOptions;
using pdserve::testing::LocalCluster;

v1::GenerateRequest Request(const std::vector<int32_t>& prompt, int max_tokens,
                            bool ignore_eos = false) {
  v1::GenerateRequest r = client::MakeRequest(prompt, max_tokens);
  r.mutable_sampling()->set_ignore_eos(ignore_eos);
  return r;
}

// Streams that keep decoding in the background (D > 0 on the decode workers) until stopped:
// a stream that reaches its `max_tokens` (in a few seconds on a fast machine) starts again,
// with the same prompt, on whichever worker the router then picks.
class BackgroundStreams {
 public:
  BackgroundStreams(std::shared_ptr<grpc::Channel> channel, int count, int max_tokens = 4000)
      : handles_(count) {
    for (int i = 0; i < count; ++i) started_.push_back(std::make_unique<absl::Notification>());
    for (int i = 0; i < count; ++i) {
      threads_.emplace_back([this, channel, i, max_tokens] {
        const absl::Time end = absl::Now() + absl::Seconds(60);
        while (!handles_[i].cancelled() && absl::Now() < end) {
          client::CallGenerate(
              channel,
              Request({1, 2, 3, static_cast<int32_t>(i + 4)}, max_tokens, /*ignore_eos=*/true),
              absl::Seconds(60),
              [this, i](const v1::GenerateResponse&) {
                if (!started_[i]->HasBeenNotified()) started_[i]->Notify();
              },
              &handles_[i]);
        }
      });
    }
  }
  bool WaitStarted(absl::Duration timeout) {
    for (auto& s : started_) {
      if (!s->WaitForNotificationWithTimeout(timeout)) return false;
    }
    return true;
  }
  ~BackgroundStreams() {
    for (auto& h : handles_) h.Cancel();
    for (auto& t : threads_) t.join();
  }

 private:
  std::vector<client::CallHandle> handles_;
  std::vector<std::unique_ptr<absl::Notification>> started_;
  std::vector<std::thread> threads_;
};

class PolicyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PolicyTest, LongColdPromptsNextToRunningDecodes) {
  // A TTFT objective no machine misses: this is about where the prompts go and that offloads
  // complete, not about the TTFT cut-off (OffloadFaultTest and the coordinator's tests cover
  // that). Under the default 2 s, a machine slow enough (the AVX2 kernels on two shared cores
  // beside a parallel test) gives up a correct offload at its TTFT budget and prefills locally.
  auto cluster = LocalCluster::Start(
      ClusterOptions{.router_flags = {"--policy=" + GetParam(), "--slo_ttft=120s"}});
  ASSERT_NE(cluster, nullptr);
  pdserve::testing::GreedyReference reference;
  std::mt19937 rng(41);
  // Short enough that both streams on one decode worker (the router's view of the load lags
  // a restart) still leave room for the offloaded prompt's blocks (--num_blocks=400 of 16
  // tokens: 2 x 94 + 44), which would otherwise wait for them.
  BackgroundStreams background(cluster->channel(), 2, /*max_tokens=*/1500);
  ASSERT_TRUE(background.WaitStarted(absl::Seconds(20)));
  // The router sees them in load reports.
  ASSERT_TRUE(cluster->WaitForStatus([](const v1::ClusterStatus& s) {
    uint32_t running = 0;
    for (const v1::WorkerStatus& w : s.workers()) running += w.load().running();
    return running >= 2;
  }));
  for (int i = 0; i < 3; ++i) {
    // Every decode worker runs a background stream as the prompt is placed (a stream that
    // ended is back within milliseconds; wait for the router to see it).
    ASSERT_TRUE(cluster->WaitForStatus([](const v1::ClusterStatus& s) {
      int decode_workers = 0;
      for (const v1::WorkerStatus& w : s.workers()) {
        if (w.registration().role() != v1::WORKER_ROLE_DECODE) continue;
        ++decode_workers;
        if (w.load().running() == 0) return false;
      }
      return decode_workers == 2;
    }));
    const std::vector<int32_t> prompt = reference.RandomPrompt(rng, 600 + 50 * i);
    const auto out =
        client::CallGenerate(cluster->channel(), Request(prompt, 6), absl::Seconds(60));
    ASSERT_TRUE(out.status.ok()) << out.status.error_message();
    EXPECT_EQ(out.tokens, reference.Generate(prompt, 6)) << "prompt " << i;
    const v1::Placement& p = out.result.placement();
    SCOPED_TRACE(p.DebugString());
    EXPECT_GT(p.running_decodes(), 0u);
    EXPECT_EQ(p.uncached_tokens(), prompt.size());
    EXPECT_EQ(p.policy(), GetParam());
    if (GetParam() == "always_local") {
      EXPECT_EQ(p.mode(), v1::PLACEMENT_MODE_LOCAL);
      EXPECT_EQ(p.reason(), "policy_always_local");
    } else {
      EXPECT_EQ(p.mode(), v1::PLACEMENT_MODE_OFFLOAD);
      EXPECT_TRUE(p.reason() == "interference_exceeds_transfer" ||
                  p.reason() == "local_exceeds_tpot_slo")
          << p.reason();
      EXPECT_GT(p.predicted_interference_ms(), p.predicted_offload_cost_ms());
      EXPECT_EQ(p.prefill_worker_id(), "prefill-0");
      EXPECT_FALSE(p.fell_back_to_local()) << p.fallback_cause();
      EXPECT_GT(out.result.timings().transfer_ms(), 0);
    }
    EXPECT_GT(out.result.timings().router_ms(), 0);
    EXPECT_GT(out.result.timings().ttft_ms(), out.result.timings().router_ms());
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, PolicyTest, ::testing::Values("cost_model", "always_local"));

class RouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = LocalCluster::Start(
        ClusterOptions{.router_flags = {"--slo_classes=interactive:500ms:50ms,batch:30s:1s"}});
    ASSERT_NE(cluster_, nullptr);
  }
  std::unique_ptr<LocalCluster> cluster_;
  pdserve::testing::GreedyReference reference_;
};

TEST_F(RouterTest, SecondTurnLandsWhereItsPrefixIsAndRunsLocally) {
  std::mt19937 rng(43);
  const std::vector<int32_t> turn1 = reference_.RandomPrompt(rng, 300);
  const auto first =
      client::CallGenerate(cluster_->channel(), Request(turn1, 20, true), absl::Seconds(60));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  const std::string worker = first.result.placement().decode_worker_id();
  // Prefix-cache events reach the router: the first turn's 18 full prompt blocks at least.
  ASSERT_TRUE(cluster_->WaitForStatus([&](const v1::ClusterStatus& s) {
    for (const v1::WorkerStatus& w : s.workers()) {
      if (w.registration().worker_id() == worker && w.indexed_blocks() >= 18) return true;
    }
    return false;
  }));
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), first.tokens.begin(), first.tokens.end());
  for (int i = 0; i < 30; ++i) turn2.push_back(static_cast<int32_t>(rng() % 100 + 5));
  // Load the other worker a little so that only the prefix explains the choice.
  const auto second =
      client::CallGenerate(cluster_->channel(), Request(turn2, 8), absl::Seconds(60));
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  const v1::Placement& p = second.result.placement();
  EXPECT_EQ(p.decode_worker_id(), worker) << p.DebugString();
  EXPECT_EQ(p.mode(), v1::PLACEMENT_MODE_LOCAL) << p.DebugString();
  EXPECT_EQ(p.reason(), "warm_prefix") << p.DebugString();
  EXPECT_LT(p.uncached_tokens(), 64u) << p.DebugString();
  EXPECT_GE(second.result.usage().cached_prompt_tokens(), 300u);
  EXPECT_EQ(second.tokens, reference_.Generate(turn2, 8));
  // Metrics in the conventions' style: requests by code, placements by mode and reason,
  // decision latency, client-facing latencies, workers by role and state.
  auto page = pdserve::testing::HttpGet(cluster_->router().metrics_address(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  for (const char* line :
       {"pdserve_router_requests_total{code=\"OK\",model_name=\"tiny\"} 2",
        "pdserve_router_placements_total{mode=\"local\",policy=\"cost_model\",reason=\"warm_"
        "prefix\"} 1",
        "pdserve_router_workers{role=\"decode\",state=\"ready\"} 2",
        "pdserve_router_workers{role=\"prefill\",state=\"ready\"} 1",
        "pdserve_router_decision_latency_seconds_count 2",
        "pdserve_router_time_to_first_token_seconds_count{mode=\"local\",model_name=\"tiny\"} 2",
        "pdserve_router_requests_in_flight 0", "pdserve_router_step_prediction_ratio_count",
        "pdserve_router_interference_predicted_seconds_total",
        "pdserve_router_e2e_request_latency_seconds_count{mode=\"local\",model_name=\"tiny\"} 2",
        "pdserve_router_inter_token_latency_seconds_count{mode=\"local\",model_name=\"tiny\"}"}) {
    EXPECT_TRUE(absl::StrContains(page->body, line)) << line;
  }
  // The decision is in the router's log with its inputs.
  const v1::ClusterStatus status = cluster_->Status();
  ASSERT_GE(status.recent_decisions_size(), 2);
  EXPECT_EQ(status.recent_decisions(0).placement().reason(), "warm_prefix");
  EXPECT_EQ(status.recent_decisions(0).prompt_tokens(), turn2.size());
}

TEST_F(RouterTest, KilledDecodeWorkerLeavesTheRegistryAndItsRequestEndsUnavailable) {
  // A long request, then kill the decode worker it runs on.
  absl::Notification streaming;
  client::GenerationOutcome long_call;
  client::CallHandle handle;
  std::thread call([&] {
    long_call = client::CallGenerate(
        cluster_->channel(), Request({7, 8, 9}, 4000, true), absl::Seconds(60),
        [&](const v1::GenerateResponse&) {
          if (!streaming.HasBeenNotified()) streaming.Notify();
        },
        &handle);
  });
  auto stop_call = [&] {
    handle.Cancel();
    call.join();
  };
  if (!streaming.WaitForNotificationWithTimeout(absl::Seconds(20))) {
    stop_call();
    FAIL() << "the long request never streamed: " << long_call.status.error_message();
  }
  const v1::ClusterStatus before = cluster_->Status();
  ASSERT_GE(before.recent_decisions_size(), 1);
  const std::string victim_id = before.recent_decisions(0).placement().decode_worker_id();
  pdserve::ChildProcess* victim = cluster_->DecodeById(victim_id);
  if (victim == nullptr) {
    stop_call();
    FAIL() << "no decode worker " << victim_id;
  }
  const absl::Time killed = absl::Now();
  victim->Kill();
  call.join();
  EXPECT_EQ(long_call.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << long_call.status.error_message();
  EXPECT_LT(absl::Now() - killed, absl::Seconds(5));
  EXPECT_TRUE(cluster_->WaitForWorkers(1, 1, absl::Seconds(5))) << cluster_->Status().DebugString();
  std::mt19937 rng(47);
  for (int i = 0; i < 4; ++i) {
    const std::vector<int32_t> prompt = reference_.RandomPrompt(rng, 40);
    const auto out =
        client::CallGenerate(cluster_->channel(), Request(prompt, 5), absl::Seconds(30));
    ASSERT_TRUE(out.status.ok()) << out.status.error_message();
    EXPECT_NE(out.result.placement().decode_worker_id(), victim_id);
    EXPECT_EQ(out.tokens, reference_.Generate(prompt, 5));
  }
}

// A second live process started with a registered worker's id is refused (it used to evict
// the first, and the two evicted each other every few seconds); the first keeps serving.
TEST_F(RouterTest, ASecondWorkerWithATakenIdIsRefusedAndTheFirstKeepsServing) {
  const v1::ClusterStatus before = cluster_->Status();
  std::string taken;
  std::string address;
  for (const v1::WorkerStatus& w : before.workers()) {
    if (w.registration().role() == v1::WORKER_ROLE_DECODE) {
      taken = w.registration().worker_id();
      address = w.registration().grpc_address();
      break;
    }
  }
  ASSERT_FALSE(taken.empty());
  auto impostor = pdserve::ChildProcess::Start(pdserve::ChildOptions{
      .binary = "pdserve-decode",
      .args = {"--model=" + pdserve::testing::TestModelDir("tiny"), "--threads=1",
               "--num_blocks=64", "--kv_transport=none", "--worker_id=" + taken,
               "--router=" + cluster_->router().grpc_address()}});
  ASSERT_TRUE(impostor.ok()) << impostor.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!absl::StrContains((*impostor)->Log(), "refused registration") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(absl::StrContains((*impostor)->Log(), "is registered by a live worker"))
      << (*impostor)->Log();
  // The first still holds the id, at its own address, and serves.
  bool first_registered = false;
  const v1::ClusterStatus after = cluster_->Status();
  for (const v1::WorkerStatus& w : after.workers()) {
    if (w.registration().worker_id() == taken) {
      first_registered = w.registration().grpc_address() == address;
    }
  }
  EXPECT_TRUE(first_registered);
  EXPECT_EQ(after.workers_size(), before.workers_size());
  const auto out =
      client::CallGenerate(cluster_->channel(), Request({1, 2, 3}, 3), absl::Seconds(30));
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
}

TEST_F(RouterTest, ListModelsCountsTheWorkersOfEachModel) {
  auto generation = v1::Generation::NewStub(cluster_->channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::ListModelsResponse models;
  ASSERT_TRUE(generation->ListModels(&ctx, v1::ListModelsRequest(), &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  const v1::ModelInfo& m = models.models(0);
  EXPECT_EQ(m.name(), "tiny");
  EXPECT_EQ(m.decode_workers(), 2u);
  EXPECT_EQ(m.prefill_workers(), 1u);
  EXPECT_NE(m.fingerprint(), 0u);
  EXPECT_EQ(m.architecture(), "LlamaForCausalLM");
  EXPECT_GT(m.vocab_size(), 0u);
  EXPECT_EQ(m.max_context_tokens(), 4096u);
}

// Each request naming an unknown model once added metric series that never went away (a
// 5,000-character name became a label value): unbounded memory for anyone who can call.
TEST_F(RouterTest, UnknownModelNamesAddNoMetricSeries) {
  auto series = [&] {
    auto page = testing::HttpGet(cluster_->router().metrics_address(), "/metrics");
    EXPECT_TRUE(page.ok());
    int n = 0;
    for (absl::string_view line : absl::StrSplit(page.ok() ? page->body : "", '\n')) {
      n += !line.empty() && line[0] != '#' ? 1 : 0;
    }
    return n;
  };
  v1::GenerateRequest warm = Request({1, 2, 3}, 4);
  warm.set_model("warm-up-unknown");
  client::CallGenerate(cluster_->channel(), warm, absl::Seconds(10));  // The label-less series.
  const int before = series();
  for (int i = 0; i < 10000; ++i) {
    v1::GenerateRequest unknown = Request({1, 2, 3}, 4);
    unknown.set_model(absl::StrCat("unknown-", i, i % 100 == 0 ? std::string(4000, 'x') : ""));
    const auto out = client::CallGenerate(cluster_->channel(), unknown, absl::Seconds(10));
    ASSERT_EQ(out.status.error_code(), grpc::StatusCode::NOT_FOUND) << i;
  }
  EXPECT_EQ(series(), before);
  auto page = testing::HttpGet(cluster_->router().metrics_address(), "/metrics");
  ASSERT_TRUE(page.ok());
  EXPECT_FALSE(absl::StrContains(page->body, "unknown-"));
}

TEST_F(RouterTest, UnknownModelAndBadInputFailBeforeAnyWorkerIsTouched) {
  v1::GenerateRequest unknown = Request({1, 2, 3}, 4);
  unknown.set_model("no-such-model");
  auto out = client::CallGenerate(cluster_->channel(), unknown, absl::Seconds(10));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(absl::StrContains(out.status.error_message(), "no-such-model"))
      << out.status.error_message();

  struct Case {
    std::string what;
    v1::GenerateRequest request;
    std::string field;
  };
  std::vector<Case> cases;
  cases.push_back({"no prompt", v1::GenerateRequest(), "prompt"});
  cases.push_back({"token out of vocab", Request({1, 1u << 30}, 4), "prompt.token_ids[1]"});
  v1::GenerateRequest temperature = Request({1, 2}, 4);
  temperature.mutable_sampling()->set_temperature(-1);
  cases.push_back({"negative temperature", temperature, "temperature"});
  cases.push_back({"beyond the context", Request({1, 2}, 1 << 20), "max_tokens"});
  v1::GenerateRequest long_id = Request({1, 2}, 4);
  long_id.set_request_id(std::string(300, 'x'));
  cases.push_back({"request id too long", long_id, "request_id"});
  v1::GenerateRequest unknown_class = Request({1, 2}, 4);
  unknown_class.mutable_objectives()->set_slo_class("gold");
  cases.push_back(
      {"unknown objective class", unknown_class,
       "objectives.slo_class: 'gold' is not a class of this router (interactive, batch)"});
  v1::GenerateRequest negative_ttft = Request({1, 2}, 4);
  negative_ttft.mutable_objectives()->set_ttft_ms(-5);
  cases.push_back({"negative TTFT objective", negative_ttft, "objectives.ttft_ms: -5"});
  v1::GenerateRequest huge_tpot = Request({1, 2}, 4);
  huge_tpot.mutable_objectives()->set_tpot_ms(1e12);
  cases.push_back({"TPOT objective above an hour", huge_tpot, "objectives.tpot_ms"});
  for (const Case& c : cases) {
    out = client::CallGenerate(cluster_->channel(), c.request, absl::Seconds(10));
    EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.what << ": " << out.status.error_message();
    EXPECT_TRUE(absl::StrContains(out.status.error_message(), c.field))
        << c.what << ": " << out.status.error_message();
  }
  // Nothing reached the workers.
  for (auto& worker : cluster_->decode()) {
    const v1::DecodeStats s = LocalCluster::DecodeStats(*worker);
    EXPECT_EQ(s.requests_finished_total(), 0u);
  }
  EXPECT_EQ(cluster_->Status().recent_decisions_size(), 0);
  // A known class, with one objective of the request's own, is served.
  v1::GenerateRequest with_class = Request({1, 2, 3}, 4);
  with_class.mutable_objectives()->set_slo_class("batch");
  with_class.mutable_objectives()->set_tpot_ms(250);
  out = client::CallGenerate(cluster_->channel(), with_class, absl::Seconds(20));
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens.size(), 4u);
  // It is counted against its class's objectives, met or missed.
  const std::string metrics = cluster_->router().metrics_address();
  for (const char* objective : {"ttft", "tpot"}) {
    double counted = 0;
    for (const char* result : {"met", "missed"}) {
      const double v = pdserve::testing::Metric(
          metrics, absl::StrCat("pdserve_router_objectives_total{objective=\"", objective,
                                "\",result=\"", result, "\",slo_class=\"batch\"}"));
      if (v > 0) counted += v;
    }
    EXPECT_EQ(counted, 1) << objective;
  }
}

TEST_F(RouterTest, CancellingAtRandomPhasesLeavesEveryWorkerAtBaseline) {
  std::mt19937 rng(53);
  constexpr int kRequests = 24;
  std::vector<std::thread> threads;
  absl::Mutex mu;
  int cancelled = 0;
  for (int i = 0; i < kRequests; ++i) {
    const std::vector<int32_t> prompt = reference_.RandomPrompt(rng, i % 2 == 0 ? 600 : 30);
    const absl::Duration cancel_after = absl::Milliseconds(rng() % 400);
    threads.emplace_back([&, prompt, cancel_after] {
      client::CallHandle handle;
      absl::Notification done;
      std::thread canceller([&] {
        if (!done.WaitForNotificationWithTimeout(cancel_after)) handle.Cancel();
      });
      const auto out = client::CallGenerate(cluster_->channel(), Request(prompt, 200, true),
                                            absl::Seconds(60), nullptr, &handle);
      done.Notify();
      canceller.join();
      EXPECT_TRUE(out.status.ok() || out.status.error_code() == grpc::StatusCode::CANCELLED)
          << out.status.error_message();
      if (!out.status.ok()) {
        absl::MutexLock lock(&mu);
        ++cancelled;
      }
    });
    absl::SleepFor(absl::Milliseconds(rng() % 50));
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(cancelled, kRequests / 4);
  for (auto& worker : cluster_->decode()) {
    EXPECT_TRUE(LocalCluster::WaitForBaseline(*worker, absl::Seconds(15)))
        << LocalCluster::DecodeStats(*worker).DebugString();
  }
  EXPECT_EQ(cluster_->Status().in_flight(), 0u);
  // Every cancelled stream finished its call: the workers shut down at once (a call left
  // unfinished would hold the drain until its deadline).
  for (auto& worker : cluster_->decode()) {
    auto status = worker->Stop(SIGTERM, absl::Seconds(3));
    ASSERT_TRUE(status.ok()) << status.status() << "\n" << worker->Log();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << worker->Log();
  }
}

TEST(RouterOverloadTest, FullRouterAnswersResourceExhaustedAtOnceWithRetryAfter) {
  auto cluster = LocalCluster::Start(
      ClusterOptions{.prefill_workers = 0,
                     .decode_workers = 1,
                     .router_flags = {"--max_in_flight=2", "--retry_after=300ms"}});
  ASSERT_NE(cluster, nullptr);
  BackgroundStreams background(cluster->channel(), 2);
  ASSERT_TRUE(background.WaitStarted(absl::Seconds(20)));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  auto stub = v1::Generation::NewStub(cluster->channel());
  const absl::Time start = absl::Now();
  auto reader = stub->Generate(&ctx, Request({1, 2, 3}, 4));
  v1::GenerateResponse message;
  EXPECT_FALSE(reader->Read(&message));
  const grpc::Status status = reader->Finish();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "retry after 300 ms"))
      << status.error_message();
  auto trailer = ctx.GetServerTrailingMetadata().find("retry-after-ms");
  ASSERT_NE(trailer, ctx.GetServerTrailingMetadata().end());
  EXPECT_EQ(std::string(trailer->second.data(), trailer->second.size()), "300");
}

// A decode worker's own refusal reaches the client with the worker's configured hint: the
// value travels as a status payload and a trailer, never parsed out of a message.
TEST(RouterOverloadTest, ADecodeWorkersRetryAfterHintReachesTheClient) {
  auto cluster = LocalCluster::Start(ClusterOptions{
      .prefill_workers = 0,
      .decode_workers = 1,
      .router_flags = {"--policy=always_local"},
      .decode_flags = {"--max_num_seqs=1", "--max_waiting=1", "--retry_after=900ms"}});
  ASSERT_NE(cluster, nullptr);
  // One stream runs, then a second one waits: the worker's queue is full.
  BackgroundStreams running(cluster->channel(), 1);
  ASSERT_TRUE(running.WaitStarted(absl::Seconds(20)));
  BackgroundStreams waiting(cluster->channel(), 1);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  v1::DecodeStats stats;
  do {
    absl::SleepFor(absl::Milliseconds(10));
    stats = LocalCluster::DecodeStats(*cluster->decode()[0]);
  } while (stats.waiting() == 0 && absl::Now() < deadline);
  ASSERT_EQ(stats.waiting(), 1u) << stats.DebugString();
  const auto out =
      client::CallGenerate(cluster->channel(), Request({1, 2, 3}, 4), absl::Seconds(10));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << out.status.error_message();
  EXPECT_EQ(out.retry_after, absl::Milliseconds(900));
}

TEST(RouterBinaryTest, HelpAndBadFlags) {
  auto help = pdserve::ChildProcess::Start(pdserve::ChildOptions{
      .binary = "pdserve-router", .args = {"--help"}, .expect_serving_info = false});
  ASSERT_TRUE(help.ok());
  auto status = (*help)->WaitExit(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  for (const char* flag : {"--policy", "--registry_listen", "--tls_cert", "--log_level"}) {
    EXPECT_TRUE(absl::StrContains((*help)->Log(), flag)) << flag << "\n" << (*help)->Log();
  }
  auto bad = pdserve::ChildProcess::Start(pdserve::ChildOptions{
      .binary = "pdserve-router",
      .args = {"--model=" + pdserve::testing::TestModelDir("tiny"), "--policy=random"},
      .expect_serving_info = false});
  ASSERT_TRUE(bad.ok());
  status = (*bad)->WaitExit(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << (*bad)->Log();
  EXPECT_TRUE(absl::StrContains((*bad)->Log(), "--policy")) << (*bad)->Log();
  auto bad_classes = pdserve::ChildProcess::Start(pdserve::ChildOptions{
      .binary = "pdserve-router",
      .args = {"--model=" + pdserve::testing::TestModelDir("tiny"), "--slo_classes=gold:fast"},
      .expect_serving_info = false});
  ASSERT_TRUE(bad_classes.ok());
  status = (*bad_classes)->WaitExit(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_FALSE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << (*bad_classes)->Log();
  EXPECT_TRUE(absl::StrContains((*bad_classes)->Log(), "--slo_classes: 'gold:fast'"))
      << (*bad_classes)->Log();
  // Client shares and worker identity: each bad value is refused naming its flag.
  for (const auto& [flag, named] : std::vector<std::pair<std::string, std::string>>{
           {"--client_max_share=0", "--client_max_share"},
           {"--client_min_requests=0", "--client_min_requests"},
           {"--client_id_header=X-User", "--client_id_header"},
           {"--client_metrics_top=1000", "--client_metrics_top"},
           {"--worker_verify_timeout=0s", "--worker_verify_timeout"},
           {"--max_workers_per_peer=-1", "--max_workers_per_peer"}}) {
    auto refused = pdserve::ChildProcess::Start(
        pdserve::ChildOptions{.binary = "pdserve-router",
                              .args = {"--model=" + pdserve::testing::TestModelDir("tiny"), flag},
                              .expect_serving_info = false});
    ASSERT_TRUE(refused.ok());
    status = (*refused)->WaitExit(absl::Seconds(10));
    ASSERT_TRUE(status.has_value()) << flag;
    EXPECT_FALSE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << flag;
    EXPECT_TRUE(absl::StrContains((*refused)->Log(), named)) << flag << "\n" << (*refused)->Log();
  }
}

}  // namespace
}  // namespace pdserve::router
