// The offloaded path with real processes: a decode worker and prefill workers talking gRPC and
// UCX (shared memory and TCP). Offloaded greedy generation is token-identical to local
// generation (short, long, prefix-cache hits, concurrent shared prefixes); a prefill worker
// killed mid-transfer or unreachable costs no request; cancelling a request while its KV is in
// flight stops the prefill worker and frees the blocks only after it acknowledged; a model or
// layout mismatch is refused with FAILED_PRECONDITION before anything is written and the
// request prefills locally.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/generator.h"
#include "engine/model_loader.h"
#include "gtest/gtest.h"
#include "pdserve/v1/decode.grpc.pb.h"
#include "server/child_process.h"
#include "tests/testing/decode_stats.h"
#include "tests/testing/greedy_reference.h"
#include "tests/testing/http_client.h"
#include "tests/testing/poll.h"
#include "tests/testing/test_models.h"
#include "tools/client/generation_client.h"

namespace pdserve::prefill {
namespace {

using pdserve::ChildOptions;
using pdserve::ChildProcess;

// The test parameter: a UCX transport, with "+staged" both workers stage their KV through a
// separate registered pool (--kv_staging=always: the GPU data path, on host memory).
std::vector<std::string> UcxArgs(const std::string& param) {
  const bool staged = absl::EndsWith(param, "+staged");
  const std::string transport = staged ? param.substr(0, param.size() - 7) : param;
  std::vector<std::string> args = {"--ucx_transports=" + transport};
  if (transport == "tcp") args.push_back("--ucx_net_devices=lo");
  if (staged) args.push_back("--kv_staging=always");
  return args;
}

std::unique_ptr<ChildProcess> Start(const std::string& binary, std::vector<std::string> args) {
  auto child = ChildProcess::Start(ChildOptions{.binary = binary, .args = std::move(args)});
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return nullptr;
  EXPECT_TRUE((*child)->WaitHealthy(absl::Seconds(30)).ok()) << (*child)->Log();
  return *std::move(child);
}

std::unique_ptr<ChildProcess> StartPrefill(const std::string& transport,
                                           std::vector<std::string> extra = {},
                                           const std::string& model = "tiny") {
  std::vector<std::string> args = {"--model=" + pdserve::testing::TestModelDir(model),
                                   "--threads=1", "--kv_cache_bytes=67108864",
                                   "--drain_timeout=5s"};
  for (auto& a : UcxArgs(transport)) args.push_back(a);
  for (auto& e : extra) args.push_back(e);
  return Start("pdserve-prefill", args);
}

std::unique_ptr<ChildProcess> StartDecode(const std::string& transport,
                                          std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--model=" + pdserve::testing::TestModelDir("tiny"),
                                   "--threads=1",
                                   "--num_blocks=400",
                                   "--max_num_batched_tokens=64",
                                   "--drain_timeout=5s",
                                   "--offload_dead_after=1s",
                                   "--offload_completion_timeout=3s"};
  for (auto& a : UcxArgs(transport)) args.push_back(a);
  for (auto& e : extra) args.push_back(e);
  return Start("pdserve-decode", args);
}

struct Worker {
  std::string id;
  std::string address;
};

v1::DecodeRequest Request(const std::vector<int32_t>& prompt, int max_tokens,
                          const std::vector<Worker>& prefill) {
  v1::DecodeRequest r;
  *r.mutable_request() = client::MakeRequest(prompt, max_tokens);
  for (const Worker& w : prefill) {
    v1::PrefillWorkerRef* ref = r.add_prefill_workers();
    ref->set_worker_id(w.id);
    ref->set_address(w.address);
  }
  return r;
}

// Waits until the decode worker holds `n` sequences in AWAITING_KV.
bool WaitForAwaitingKv(const std::string& address, uint32_t n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (testing::DecodeStatsOf(address).awaiting_kv() == n) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return false;
}

using pdserve::testing::Metric;
using pdserve::testing::WaitForMetricAtLeast;

// Joins a thread however the test leaves its scope (an ASSERT must not leave it running),
// after `unblock` made it finish.
class JoinOnExit {
 public:
  JoinOnExit(std::thread* thread, std::function<void()> unblock)
      : thread_(thread), unblock_(std::move(unblock)) {}
  ~JoinOnExit() {
    if (!thread_->joinable()) return;
    unblock_();
    thread_->join();
  }

 private:
  std::thread* thread_;
  std::function<void()> unblock_;
};

class OffloadTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    decode_ = StartDecode(GetParam());
    ASSERT_NE(decode_, nullptr);
    prefill_ = StartPrefill(GetParam());
    ASSERT_NE(prefill_, nullptr);
    channel_ = client::MakeChannel(decode_->grpc_address(), GrpcSecurity());
  }
  Worker PrefillRef() const { return Worker{"prefill-a", prefill_->grpc_address()}; }

  client::GenerationOutcome Call(const v1::DecodeRequest& r) {
    return client::CallDecode(channel_, r, absl::Seconds(60));
  }

  // Checks one offloaded request end to end.
  void ExpectOffloaded(const client::GenerationOutcome& out, const std::vector<int32_t>& expected,
                       const std::string& prefill_id, const std::string& what) {
    ASSERT_TRUE(out.status.ok()) << what << ": " << out.status.error_message() << "\n"
                                 << decode_->Log();
    EXPECT_EQ(out.tokens, expected) << what;
    ASSERT_TRUE(out.has_result) << what;
    const v1::Placement& p = out.result.placement();
    EXPECT_EQ(p.mode(), v1::PLACEMENT_MODE_OFFLOAD) << what;
    EXPECT_FALSE(p.fell_back_to_local()) << what << ": " << p.fallback_cause();
    EXPECT_EQ(p.prefill_worker_id(), prefill_id) << what;
    EXPECT_GT(out.result.timings().transfer_ms(), 0) << what;
    EXPECT_GT(out.result.timings().prefill_ms(), 0) << what;
    // What the router's cost model learns from: measured, not predicted.
    EXPECT_GT(p.transfer_bytes(), 0u) << what;
    EXPECT_EQ(p.prefill_computed_tokens(), out.result.usage().prompt_tokens()) << what;
    // And the batch its compute time covers: this prompt, perhaps with others.
    const double computed = p.prefill_computed_tokens();
    EXPECT_GE(p.prefill_batch_tokens(), p.prefill_computed_tokens()) << what;
    EXPECT_GE(p.prefill_batch_token_squares(), computed * computed) << what;
    EXPECT_LE(p.prefill_batch_token_squares(),
              static_cast<double>(p.prefill_batch_tokens()) * p.prefill_batch_tokens())
        << what;
  }

  pdserve::testing::GreedyReference reference_;
  std::unique_ptr<ChildProcess> decode_;
  std::unique_ptr<ChildProcess> prefill_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_P(OffloadTest, OffloadedGenerationIsTokenIdenticalToLocal) {
  std::mt19937 rng(7);
  // Short, block-boundary and long prompts, each with nothing cached.
  for (int length : {1, 5, 15, 16, 17, 33, 120, 400}) {
    const std::vector<int32_t> prompt = reference_.RandomPrompt(rng, length);
    const std::vector<int32_t> expected = reference_.Generate(prompt, 12);
    ExpectOffloaded(Call(Request(prompt, 12, {PrefillRef()})), expected,
                    "prefill-" + prefill_->grpc_address(), absl::StrCat("prompt of ", length));
  }
  EXPECT_TRUE(testing::WaitForDecodeBaseline(decode_->grpc_address(), absl::Seconds(10)));
  EXPECT_GT(Metric(prefill_->metrics_address(), "pdserve_kv_transfer_bytes_total"), 0);
  // Every offloaded sequence's wait for its KV is observed (8 prompts above).
  EXPECT_GE(Metric(decode_->metrics_address(), "pdserve_kv_transfer_wait_seconds_count"), 8);
}

TEST_P(OffloadTest, PrefixCacheHitsTransferOnlyTheSuffix) {
  std::mt19937 rng(11);
  const std::vector<int32_t> shared = reference_.RandomPrompt(rng, 96);
  // Warm the prefix cache (offloaded too: the transferred blocks enter the cache).
  std::vector<int32_t> first = shared;
  first.push_back(5);
  ExpectOffloaded(Call(Request(first, 4, {PrefillRef()})), reference_.Generate(first, 4),
                  "prefill-" + prefill_->grpc_address(), "warm-up");
  for (int suffix : {1, 20, 64}) {
    std::vector<int32_t> prompt = shared;
    for (int i = 0; i < suffix; ++i)
      prompt.push_back(static_cast<int32_t>(rng() % reference_.vocab()));
    const auto out = Call(Request(prompt, 10, {PrefillRef()}));
    ExpectOffloaded(out, reference_.Generate(prompt, 10), "prefill-" + prefill_->grpc_address(),
                    absl::StrCat("suffix of ", suffix));
    EXPECT_EQ(out.result.usage().cached_prompt_tokens(), 96u) << "suffix of " << suffix;
  }
  EXPECT_TRUE(testing::WaitForDecodeBaseline(decode_->grpc_address(), absl::Seconds(10)));
}

TEST_P(OffloadTest, ConcurrentPromptsSharingPrefixes) {
  std::mt19937 rng(13);
  const std::vector<int32_t> a = reference_.RandomPrompt(rng, 48);
  const std::vector<int32_t> b = reference_.RandomPrompt(rng, 80);
  constexpr int kRequests = 12;
  std::vector<std::vector<int32_t>> prompts(kRequests);
  std::vector<std::vector<int32_t>> expected(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    prompts[i] = i % 2 == 0 ? a : b;
    for (int j = 0, n = 1 + static_cast<int>(rng() % 40); j < n; ++j) {
      prompts[i].push_back(static_cast<int32_t>(rng() % reference_.vocab()));
    }
    expected[i] = reference_.Generate(prompts[i], 8);
  }
  std::vector<client::GenerationOutcome> outcomes(kRequests);
  std::vector<std::thread> threads;
  // Half offloaded, half local, all at once: both paths share blocks and batches.
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      outcomes[i] = Call(Request(
          prompts[i], 8, i % 3 == 2 ? std::vector<Worker>{} : std::vector<Worker>{PrefillRef()}));
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(outcomes[i].status.ok()) << i << ": " << outcomes[i].status.error_message();
    EXPECT_EQ(outcomes[i].tokens, expected[i]) << "request " << i;
    EXPECT_EQ(outcomes[i].result.placement().mode(),
              i % 3 == 2 ? v1::PLACEMENT_MODE_LOCAL : v1::PLACEMENT_MODE_OFFLOAD)
        << i;
  }
  EXPECT_TRUE(testing::WaitForDecodeBaseline(decode_->grpc_address(), absl::Seconds(10)));
}

TEST_P(OffloadTest, PrefillWorkerKilledMidTransferFallsBackWithIdenticalTokens) {
  std::mt19937 rng(17);
  for (const bool with_alternate : {true, false}) {
    SCOPED_TRACE(with_alternate ? "alternate prefill worker" : "local fallback");
    auto slow = StartPrefill(GetParam(), {"--layer_delay=400ms"});
    ASSERT_NE(slow, nullptr);
    const std::vector<int32_t> prompt = reference_.RandomPrompt(rng, 200);
    const std::vector<int32_t> expected = reference_.Generate(prompt, 10);
    std::vector<Worker> targets = {Worker{"prefill-slow", slow->grpc_address()}};
    if (with_alternate) targets.push_back(PrefillRef());
    client::GenerationOutcome out;
    std::thread call([&] { out = Call(Request(prompt, 10, targets)); });
    JoinOnExit joiner(&call, [&] { slow->Kill(); });
    ASSERT_TRUE(WaitForAwaitingKv(decode_->grpc_address(), 1, absl::Seconds(10)));
    // At least one layer written, then into that layer's pause: killed while its transfer is
    // idle. (Killed while a layer is still in flight over TCP, UCX 1.13 aborts the *decode*
    // worker in its error path, ucp_request_send_state_ff's wireup assertion: a known bug,
    // reproduced 3 of 10 runs under load, not fixed yet; see docs/reliability.md.)
    ASSERT_TRUE(
        WaitForMetricAtLeast(slow->metrics_address(), "pdserve_kv_transfer_layers_total", 1));
    absl::SleepFor(absl::Milliseconds(200));
    slow->Kill();
    call.join();
    ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << decode_->Log();
    EXPECT_EQ(out.tokens, expected);
    const v1::Placement& p = out.result.placement();
    if (with_alternate) {
      EXPECT_EQ(p.mode(), v1::PLACEMENT_MODE_OFFLOAD);
      EXPECT_EQ(p.prefill_worker_id(), "prefill-" + prefill_->grpc_address());
      EXPECT_FALSE(p.fell_back_to_local());
    } else {
      EXPECT_TRUE(p.fell_back_to_local());
      EXPECT_EQ(p.fallback_cause(), "prefill_error");
    }
    // The killed worker's blocks stay quarantined until it is known dead, then all return.
    EXPECT_TRUE(testing::WaitForDecodeBaseline(decode_->grpc_address(), absl::Seconds(15)))
        << testing::DecodeStatsOf(decode_->grpc_address()).DebugString();
  }
  EXPECT_GE(testing::DecodeStatsOf(decode_->grpc_address()).offload_fallbacks_total(), 1u);
}

// Killed while a layer is in flight (no pause between layers, several kills at different
// points of the transfer): the decode worker keeps serving and the request falls back with
// the tokens it gets alone. Over TCP this was UCX 1.13's abort (docs/reliability.md: the decode
// worker died in ucp_request_send_state_ff's wireup assertion, 4-5 of 8 runs with two busy
// loops beside it, when a new prefill worker died before the decode worker's wireup reply had
// left); the sender's greeting (kvtransfer/wire.h) closed it. PDSERVE_OFFLOAD_KILLS sets the
// number of kills (4; scripts/ucx_kill_stress.sh runs 50 under load).
TEST_P(OffloadTest, PrefillWorkerKilledWhileALayerIsInFlightLeavesTheDecodeWorkerServing) {
  const char* kills_env = std::getenv("PDSERVE_OFFLOAD_KILLS");
  const int kills = kills_env != nullptr ? std::max(1, std::atoi(kills_env)) : 4;
  std::mt19937 rng(29);
  // A kill that found no layer in flight because the decode worker had rightly given up on the
  // fresh prefill worker first (on a loaded machine its health check can take longer than the
  // liveness timeout) is tried again, a few times at most: the fallback is checked, but the
  // scenario under test did not happen.
  int not_reached = 0;
  for (int kill = 0; kill < kills; ++kill) {
    SCOPED_TRACE(::testing::Message() << "kill " << kill);
    auto slow =
        StartPrefill(GetParam(), {"--layer_delay=" + std::to_string(5 * (kill % 4)) + "ms"});
    ASSERT_NE(slow, nullptr);
    const std::vector<int32_t> prompt = reference_.RandomPrompt(rng, 400);
    const std::vector<int32_t> expected = reference_.Generate(prompt, 6);
    client::GenerationOutcome out;
    std::atomic<bool> done = false;
    std::thread call([&] {
      out = Call(Request(prompt, 6, {Worker{"prefill-slow", slow->grpc_address()}}));
      done = true;
    });
    JoinOnExit joiner(&call, [&] { slow->Kill(); });
    // The first layer has landed; the next ones are on the wire. (Waiting for the call too: a
    // request that ended without offloading would otherwise fail here with nothing to say why.)
    auto layers = [&] {
      return Metric(slow->metrics_address(), "pdserve_kv_transfer_layers_total");
    };
    testing::PollUntil([&] { return done || layers() >= 1; }, absl::Seconds(10),
                       absl::Milliseconds(10));
    const bool layer_sent = layers() >= 1;
    const bool ended_first = done;  // Not a call stuck until the kill.
    slow->Kill();
    call.join();
    ASSERT_TRUE(decode_->running()) << decode_->Log();
    ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << decode_->Log();
    EXPECT_EQ(out.tokens, expected);
    EXPECT_TRUE(testing::WaitForDecodeBaseline(decode_->grpc_address(), absl::Seconds(15)))
        << testing::DecodeStatsOf(decode_->grpc_address()).DebugString();
    if (!layer_sent) {
      const v1::Placement& placement = out.result.placement();
      ASSERT_TRUE(ended_first && placement.fell_back_to_local() && ++not_reached <= 3)
          << "no layer was sent (the call " << (ended_first ? "had ended" : "was still running")
          << ", " << not_reached << " such kills): placement " << placement.ShortDebugString()
          << "\nprefill worker log:\n"
          << slow->Log() << "\ndecode worker log:\n"
          << decode_->Log();
      std::cerr << "kill " << kill
                << " found no layer in flight (fallback: " << placement.fallback_cause()
                << "); once more\n";
      --kill;
    }
  }
}

TEST_P(OffloadTest, UnreachablePrefillWorkerMovesToTheAlternate) {
  std::mt19937 rng(19);
  const std::vector<int32_t> prompt = reference_.RandomPrompt(rng, 70);
  // Nothing listens on port 1.
  const auto out = Call(Request(prompt, 6, {Worker{"prefill-gone", "127.0.0.1:1"}, PrefillRef()}));
  ExpectOffloaded(out, reference_.Generate(prompt, 6), "prefill-" + prefill_->grpc_address(),
                  "alternate");
  EXPECT_TRUE(testing::WaitForDecodeBaseline(decode_->grpc_address(), absl::Seconds(15)));
}

TEST_P(OffloadTest, CancelWhileAwaitingKvStopsThePrefillAndFreesBlocksAfterItsAck) {
  auto slow = StartPrefill(GetParam(), {"--layer_delay=1s"});
  ASSERT_NE(slow, nullptr);
  std::mt19937 rng(23);
  const std::vector<int32_t> prompt = reference_.RandomPrompt(rng, 150);
  // The test owns the call's context, so it can cancel it however the call ends.
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  auto stub = v1::Decode::NewStub(channel_);
  auto reader =
      stub->Generate(&context, Request(prompt, 10, {Worker{"prefill-slow", slow->grpc_address()}}));
  v1::GenerateResponse last;
  grpc::Status status;
  std::thread call([&] {
    v1::GenerateResponse message;
    while (reader->Read(&message)) last = message;
    status = reader->Finish();
  });
  JoinOnExit joiner(&call, [&] { context.TryCancel(); });
  ASSERT_TRUE(WaitForAwaitingKv(decode_->grpc_address(), 1, absl::Seconds(10)));
  // Let the prefill worker start computing (a queued job would be stopped at once): it is
  // then inside its first layer's pause when the cancellation arrives.
  ASSERT_TRUE(WaitForMetricAtLeast(slow->metrics_address(), "pdserve_kv_transfer_layers_total", 1));
  context.TryCancel();
  call.join();
  ASSERT_EQ(status.error_code(), grpc::StatusCode::CANCELLED)
      << "the call ended before it was cancelled: " << last.DebugString() << "\n"
      << decode_->Log();
  // The prefill worker is sleeping inside a layer: until it reaches the next layer boundary
  // and acknowledges, the blocks it writes are quarantined, not free: the sequence's own, or
  // (staged) the staging blocks, while the sequence's blocks, never written, are free at once.
  const bool staged = absl::EndsWith(GetParam(), "+staged");
  const std::string staging_in_use = "pdserve_kv_staging_blocks{state=\"in_use\"}";
  bool saw_quarantine = false;
  for (int i = 0; i < 50 && !saw_quarantine; ++i) {
    const v1::DecodeStats s = testing::DecodeStatsOf(decode_->grpc_address());
    saw_quarantine =
        s.awaiting_kv() == 0 && (staged ? Metric(decode_->metrics_address(), staging_in_use) > 0
                                        : s.blocks().quarantined() > 0);
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(saw_quarantine);
  EXPECT_TRUE(testing::WaitForDecodeBaseline(decode_->grpc_address(), absl::Seconds(10)));
  EXPECT_TRUE(WaitForMetricAtLeast(slow->metrics_address(), "pdserve_prefill_cancelled_total", 1));
  if (staged) {
    // Both sides' staging blocks come back: the decode worker's with the acknowledgement, the
    // prefill worker's when its cancelled batch ends.
    for (const std::string& metrics : {decode_->metrics_address(), slow->metrics_address()}) {
      EXPECT_TRUE(pdserve::testing::PollUntil([&] { return Metric(metrics, staging_in_use) == 0; },
                                              absl::Seconds(10)))
          << metrics;
    }
  }
  EXPECT_EQ(Metric(slow->metrics_address(), "pdserve_prefill_cancelled_total"), 1) << slow->Log();
  EXPECT_EQ(Metric(slow->metrics_address(), "pdserve_prefill_requests_total"), 0);
}

TEST_P(OffloadTest, ModelOrLayoutMismatchIsRefusedAndPrefillsLocally) {
  std::mt19937 rng(29);
  struct Case {
    std::string what;
    std::string model;
    std::vector<std::string> flags;
  };
  for (const Case& c : {Case{"other model", "tiny-qwen2", {}},
                        Case{"other block size", "tiny", {"--block_size=32"}},
                        Case{"other kv dtype", "tiny", {"--kv_dtype=f16"}}}) {
    SCOPED_TRACE(c.what);
    auto other = StartPrefill(GetParam(), c.flags, c.model);
    ASSERT_NE(other, nullptr);
    const std::vector<int32_t> prompt = reference_.RandomPrompt(rng, 50);
    const auto out = Call(Request(prompt, 8, {Worker{"prefill-other", other->grpc_address()}}));
    ASSERT_TRUE(out.status.ok()) << out.status.error_message();
    EXPECT_EQ(out.tokens, reference_.Generate(prompt, 8));
    EXPECT_TRUE(out.result.placement().fell_back_to_local());
    EXPECT_EQ(out.result.placement().fallback_cause(), "layout_mismatch");
    EXPECT_EQ(Metric(other->metrics_address(), "pdserve_kv_transfer_bytes_total"), 0);
    EXPECT_EQ(Metric(other->metrics_address(),
                     "pdserve_prefill_failures_total{model_name=\"" +
                         std::string(c.model == "tiny" ? "tiny" : "tiny-qwen2") +
                         "\",reason=\"layout_mismatch\"}"),
              1);
    EXPECT_TRUE(testing::WaitForDecodeBaseline(decode_->grpc_address(), absl::Seconds(5)));
  }
}

TEST_P(OffloadTest, RestartedWorkersGetFreshEndpoints) {
  std::mt19937 rng(31);
  // A prefill worker restarted at the same address: the decode worker's next request reaches
  // the new process, which connects to the decode worker afresh.
  auto first = StartPrefill(GetParam());
  ASSERT_NE(first, nullptr);
  const std::string address = first->grpc_address();
  std::vector<int32_t> prompt = reference_.RandomPrompt(rng, 60);
  ExpectOffloaded(Call(Request(prompt, 5, {Worker{"p", address}})), reference_.Generate(prompt, 5),
                  "prefill-" + address, "before the prefill restart");
  first->Kill();
  auto second = StartPrefill(GetParam(), {"--listen=" + address});
  ASSERT_NE(second, nullptr);
  prompt = reference_.RandomPrompt(rng, 61);
  ExpectOffloaded(Call(Request(prompt, 5, {Worker{"p", address}})), reference_.Generate(prompt, 5),
                  "prefill-" + address, "after the prefill restart");

  // A decode worker restarted at the same address (same id, new epoch, new pool): the prefill
  // worker must retire its endpoint and rkey for the old epoch.
  prompt = reference_.RandomPrompt(rng, 62);
  ExpectOffloaded(Call(Request(prompt, 5, {PrefillRef()})), reference_.Generate(prompt, 5),
                  "prefill-" + prefill_->grpc_address(), "before the decode restart");
  const std::string decode_address = decode_->grpc_address();
  decode_->Kill();
  decode_ = StartDecode(GetParam(), {"--listen=" + decode_address});
  ASSERT_NE(decode_, nullptr);
  channel_ = client::MakeChannel(decode_address, GrpcSecurity());
  prompt = reference_.RandomPrompt(rng, 63);
  ExpectOffloaded(Call(Request(prompt, 5, {PrefillRef()})), reference_.Generate(prompt, 5),
                  "prefill-" + prefill_->grpc_address(), "after the decode restart");
  EXPECT_TRUE(testing::WaitForDecodeBaseline(decode_address, absl::Seconds(10)));
}

INSTANTIATE_TEST_SUITE_P(Ucx, OffloadTest, ::testing::Values("shm", "tcp", "shm+staged"));

}  // namespace
}  // namespace pdserve::prefill
