// The decode worker's offload state machine, in one process, on a fake clock: a real engine
// loop and a real prefill batcher (each with its own copy of the "micro" model) exchange KV
// through the loopback transport, behind the fault-injecting transport; the prefill worker is
// reached through a scripted PrefillClient that can serve, refuse, hang, ignore cancels or
// stop answering health checks. Every scenario checks the tokens against the engine run
// alone, and that every block comes back (nothing in use, reserved or quarantined).
#include "decode_worker/offload_coordinator.h"

#include <deque>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "common/hand_back.h"
#include "gtest/gtest.h"
#include "kvtransfer/loopback/loopback_transport.h"
#include "kvtransfer/staging/staging_transport.h"
#include "kvtransfer/testing/fault_injecting_transport.h"
#include "kvtransfer/testing/host_block_copier.h"
#include "prefill_worker/prefill_batcher.h"
#include "tests/decode_worker/offload_test_doubles.h"
#include "tests/testing/greedy_reference.h"
#include "tests/testing/poll.h"
#include "tests/testing/test_models.h"

namespace pdserve::decode {
namespace {

using kvtransfer::FaultInjectingTransport;
using kvtransfer::FaultPlan;
using kvtransfer::LoopbackFabric;
using kvtransfer::LoopbackTransport;
using offload_testing::InProcessPrefillWorker;
using offload_testing::kBlockSize;
using offload_testing::kEpoch;
using offload_testing::kRealWait;
using offload_testing::RecordingSink;
using offload_testing::Script;
using offload_testing::ScriptedPrefillClient;

const std::vector<PrefillTarget> kOneWorker = {{"prefill-0", "prefill-0:1"}};

// The parameter: both workers stage their KV through a separate registered staging pool (the
// GPU data path, with host memory standing in for the device pools), or register their pools.
class OffloadCoordinatorTest : public ::testing::TestWithParam<bool> {
 protected:
  static constexpr int kStagingBlocks = 24;
  bool staged() const { return GetParam(); }

  static void SetUpTestSuite() { reference_ = new testing::GreedyReference("micro"); }
  static void TearDownTestSuite() {
    delete reference_;
    reference_ = nullptr;
  }

  // Builds the decode worker (a pool of `num_blocks`) and the prefill worker, and starts them.
  void Start(int num_blocks, OffloadConfig config = OffloadConfig()) {
    const std::string dir = testing::TestModelDir("micro");
    auto model = engine::LoadModel(dir, engine::EngineOptions{.num_threads = 1});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    fabric_ = std::make_shared<LoopbackFabric>();
    transport_ = std::make_unique<LoopbackTransport>(fabric_, "decode-0");
    KvLayout layout = model_.model->MakeKvLayout(1, kBlockSize, DType::kF32);
    layout.num_blocks = num_blocks;
    KvLayout registered = layout;
    if (staged()) registered.num_blocks = kStagingBlocks;
    auto tp = transport_->CreatePool(registered);
    ASSERT_TRUE(tp.ok()) << tp.status();
    transport_pool_ = *std::move(tp);
    auto pool =
        staged() ? kvcache::KvPool::Allocate(layout)
                 : kvcache::KvPool::Wrap(layout, transport_pool_->base(), transport_pool_->bytes());
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
    // What the coordinator talks to: the loopback transport, or the staging one over it.
    kvtransfer::KvTransport* decode_transport = transport_.get();
    if (staged()) {
      copier_ = std::make_unique<kvtransfer::HostBlockCopier>(
          kvtransfer::PoolView{pool_->base(), layout},
          kvtransfer::PoolView{transport_pool_->base(), registered});
      staging_ = kvtransfer::StagingPool::Create(kStagingBlocks, "--kv_staging_blocks");
      staged_transport_ = std::make_unique<kvtransfer::StagingTransport>(
          transport_.get(), transport_pool_.get(), copier_.get(), staging_, num_blocks);
      decode_transport = staged_transport_.get();
    }
    auto descriptor = decode_transport->ServePool(transport_pool_.get(), "decode-0",
                                                  model_.model->fingerprint(), kEpoch);
    ASSERT_TRUE(descriptor.ok()) << descriptor.status();
    registry_ = std::make_unique<prometheus::Registry>();
    metrics_ = std::make_unique<DecodeMetrics>(*registry_, "micro");
    SchedulerConfig sc;
    sc.block_size = kBlockSize;
    sc.max_num_seqs = 8;
    sc.max_awaiting_kv = max_awaiting_kv_;
    sc.max_num_batched_tokens = 32;
    sc.max_waiting = 64;
    sc.model_fingerprint = model_.model->fingerprint();
    loop_ = std::make_unique<EngineLoop>(model_.model.get(), pool_.get(), model_.eos_token_ids, sc,
                                         metrics_.get(), &clock_);

    prefill_ = std::make_unique<InProcessPrefillWorker>();
    auto pmodel = engine::LoadModel(dir, engine::EngineOptions{.num_threads = 1});
    ASSERT_TRUE(pmodel.ok());
    prefill_->model = *std::move(pmodel);
    prefill_->transport = std::make_unique<LoopbackTransport>(fabric_, "prefill-0");
    prefill_->faulty =
        std::make_unique<FaultInjectingTransport>(prefill_->transport.get(), FaultPlan());
    KvLayout playout = prefill_->model.model->MakeKvLayout(1, kBlockSize, DType::kF32);
    playout.num_blocks = 64;
    KvLayout pregistered = playout;
    if (staged()) pregistered.num_blocks = kStagingBlocks;
    auto ptp = prefill_->faulty->CreatePool(pregistered);
    ASSERT_TRUE(ptp.ok());
    prefill_->transport_pool = *std::move(ptp);
    auto ppool = staged() ? kvcache::KvPool::Allocate(playout)
                          : kvcache::KvPool::Wrap(playout, prefill_->transport_pool->base(),
                                                  prefill_->transport_pool->bytes());
    ASSERT_TRUE(ppool.ok());
    prefill_->pool = *std::move(ppool);
    kvtransfer::KvTransport* prefill_transport = prefill_->faulty.get();
    if (staged()) {
      prefill_->copier = std::make_unique<kvtransfer::HostBlockCopier>(
          kvtransfer::PoolView{prefill_->pool->base(), playout},
          kvtransfer::PoolView{prefill_->transport_pool->base(), pregistered});
      prefill_->staging = kvtransfer::StagingPool::Create(kStagingBlocks, "--kv_staging_blocks");
      prefill_->staged = std::make_unique<kvtransfer::StagingTransport>(
          prefill_->faulty.get(), prefill_->transport_pool.get(), prefill_->copier.get(),
          prefill_->staging, playout.num_blocks);
      prefill_transport = prefill_->staged.get();
    }
    prefill_->registry = std::make_unique<prometheus::Registry>();
    prefill_->metrics = std::make_unique<prefill::PrefillMetrics>(*prefill_->registry, "micro");
    prefill_->batcher = std::make_unique<prefill::PrefillBatcher>(
        prefill_->model.model.get(), prefill_->pool.get(), prefill_transport,
        prefill_->transport_pool.get(), prefill::PrefillBatcherConfig(), prefill_->metrics.get());
    prefill_->batcher->Start();

    client_ = std::make_unique<ScriptedPrefillClient>(prefill_->batcher.get());
    coordinator_ = std::make_unique<OffloadCoordinator>(loop_.get(), decode_transport, *descriptor,
                                                        client_.get(), &clock_, config);
    coordinator_->Attach();
    loop_->Start();
  }

  void TearDown() override {
    if (loop_) loop_->Stop();
    coordinator_.reset();
    client_.reset();
    prefill_.reset();
    loop_.reset();
    staged_transport_.reset();
    copier_.reset();
    pool_.reset();
    transport_pool_.reset();
    transport_.reset();
  }

  std::unique_ptr<Sequence> MakeSequence(const std::vector<int32_t>& prompt, int max_tokens,
                                         std::shared_ptr<RecordingSink> sink) {
    auto seq = std::make_unique<Sequence>();
    seq->request_id = "req-" + std::to_string(++next_id_);
    seq->arrival = clock_.Now();
    seq->tokens = prompt;
    seq->prompt_len = static_cast<int>(prompt.size());
    seq->sampling.max_tokens = max_tokens;
    seq->sampling.temperature = 0;
    seq->stream = std::make_unique<text::GenerationStream>(model_.tokenizer.get(), seq->sampling,
                                                           model_.eos_token_ids);
    seq->sink = std::move(sink);
    return seq;
  }

  // Submits `prompt` on the offload path to `targets`.
  std::shared_ptr<RecordingSink> Offload(const std::vector<int32_t>& prompt, int max_tokens,
                                         const std::vector<PrefillTarget>& targets,
                                         absl::Duration deadline = absl::Hours(1)) {
    return OffloadWithin(prompt, max_tokens, targets, {.deadline = clock_.Now() + deadline});
  }
  std::shared_ptr<RecordingSink> OffloadWithin(const std::vector<int32_t>& prompt, int max_tokens,
                                               const std::vector<PrefillTarget>& targets,
                                               OffloadBudget budget) {
    auto sink = std::make_shared<RecordingSink>();
    EXPECT_TRUE(coordinator_->Handle(MakeSequence(prompt, max_tokens, sink), targets, budget).ok());
    return sink;
  }

  // Runs `fn` on the loop thread and waits for it.
  template <typename Fn>
  auto OnLoop(Fn fn) -> decltype(fn()) {
    absl::Notification done;
    decltype(fn()) result{};
    loop_->Post([&] {
      result = fn();
      done.Notify();
    });
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(kRealWait));
    return result;
  }
  kvcache::BlockCounts Blocks() {
    return OnLoop([this] { return loop_->scheduler().blocks()->counts(); });
  }
  // Blocks a failed attempt's writer may still write: pool blocks, or staging blocks when
  // staged (the sequence's own are never the transport's target then).
  int Quarantined() {
    if (staged()) return kStagingBlocks - staging_->free_blocks();
    return OnLoop([this] { return loop_->scheduler().blocks()->counts().quarantined; });
  }
  // Waits (real time, polling the loop) until `pred` holds there.
  bool WaitOnLoop(const std::function<bool()>& pred) {
    return testing::PollUntil([&] { return OnLoop([&] { return pred(); }); }, kRealWait);
  }
  // Every block free or cached; no offload or quarantine left.
  void ExpectBaseline() {
    EXPECT_TRUE(WaitOnLoop([this] {
      const kvcache::BlockCounts c = loop_->scheduler().blocks()->counts();
      return c.in_use == 0 && c.reserved == 0 && c.quarantined == 0 &&
             coordinator_->offloads_in_progress() == 0 &&
             coordinator_->quarantined_transfers() == 0 &&
             (!staged() || (staging_->free_blocks() == kStagingBlocks &&
                            prefill_->staging->free_blocks() == kStagingBlocks));
    })) << "in use "
        << Blocks().in_use << ", reserved " << Blocks().reserved << ", quarantined "
        << Quarantined();
  }

  std::vector<int32_t> Prompt(int length, uint32_t seed) {
    std::mt19937 rng(seed);
    return reference_->RandomPrompt(rng, length);
  }
  // The tokens `prompt` gets alone (greedy), starting with the first generated one.
  std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, int max_tokens) {
    return reference_->Generate(prompt, max_tokens);
  }

  static testing::GreedyReference* reference_;
  FakeClock clock_{absl::Now()};
  engine::LoadedModel model_;
  std::shared_ptr<LoopbackFabric> fabric_;
  std::unique_ptr<LoopbackTransport> transport_;
  std::unique_ptr<kvtransfer::LocalPool> transport_pool_;
  std::unique_ptr<kvcache::KvPool> pool_;
  std::unique_ptr<prometheus::Registry> registry_;
  std::unique_ptr<DecodeMetrics> metrics_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<InProcessPrefillWorker> prefill_;
  std::unique_ptr<ScriptedPrefillClient> client_;
  int max_awaiting_kv_ = 16;  // Set before Start.
  std::unique_ptr<OffloadCoordinator> coordinator_;
  std::unique_ptr<kvtransfer::HostBlockCopier> copier_;  // Staged: pool <-> staging.
  std::shared_ptr<kvtransfer::StagingPool> staging_;
  std::unique_ptr<kvtransfer::StagingTransport> staged_transport_;  // Over transport_.
  int next_id_ = 0;
};

testing::GreedyReference* OffloadCoordinatorTest::reference_ = nullptr;

INSTANTIATE_TEST_SUITE_P(KvPath, OffloadCoordinatorTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Staged" : "Registered";
                         });

TEST_P(OffloadCoordinatorTest, OffloadedPrefillGivesTheTokensOfALocalRun) {
  Start(64);
  const auto prompt = Prompt(22, 1);
  auto sink = Offload(prompt, 6, kOneWorker);
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->tokens(), Alone(prompt, 6));
  const StreamSink::Final f = sink->final();
  EXPECT_TRUE(f.offloaded);
  EXPECT_FALSE(f.fell_back_to_local);
  EXPECT_EQ(f.prefill_worker_id, "prefill-0");
  EXPECT_EQ(f.offload.computed_tokens, 22);
  // Six blocks of K and V in every layer.
  const KvLayout& layout = pool_->layout();
  EXPECT_EQ(f.offload.transfer_bytes, uint64_t{6} * layout.region_bytes() * 2 * layout.num_layers);
  EXPECT_EQ(loop_->Stats().offload_completions, 1u);
  ExpectBaseline();
}

// The engine loop never waits on a staged landing: while the staging -> pool copy of an
// offloaded prompt is held up (a busy device), a stream already decoding on the worker keeps
// producing tokens, and the offloaded one starts once its copy landed.
TEST_P(OffloadCoordinatorTest, DecodingContinuesWhileAStagedTransferLands) {
  if (!staged()) GTEST_SKIP() << "a registered pool is written by the sender: nothing lands";
  Start(400);
  auto running = std::make_shared<RecordingSink>();
  auto seq = MakeSequence(Prompt(8, 11), 1200, running);
  seq->sampling.ignore_eos = true;
  ASSERT_TRUE(loop_->Submit(std::move(seq)).ok());
  ASSERT_TRUE(testing::PollUntil([&] { return !running->tokens().empty(); }, kRealWait));
  copier_->Hold();
  const auto prompt = Prompt(22, 12);
  auto offloaded = Offload(prompt, 4, kOneWorker);
  // The transfer arrived and its landing copy is queued behind the hold.
  ASSERT_TRUE(testing::PollUntil([&] { return copier_->queued() > 0; }, kRealWait));
  ASSERT_FALSE(running->finished());
  const size_t before = running->tokens().size();
  EXPECT_TRUE(testing::PollUntil([&] { return running->tokens().size() >= before + 3; }, kRealWait))
      << "the loop stalled while the copy was held: " << running->tokens().size() << " tokens";
  EXPECT_TRUE(offloaded->tokens().empty());  // Not a token before its KV is in its blocks.
  copier_->Resume();
  ASSERT_TRUE(offloaded->WaitFinished());
  EXPECT_EQ(offloaded->tokens(), Alone(prompt, 4));
  EXPECT_TRUE(offloaded->final().offloaded);
  EXPECT_FALSE(offloaded->final().fell_back_to_local);
  running->Cancel();
  ASSERT_TRUE(running->WaitFinished());
  ExpectBaseline();
}

// A landing copy that fails (a device error) fails the attempt like a broken transfer: the
// sequence prefills locally, and nothing is left held.
TEST_P(OffloadCoordinatorTest, AFailedLandingCopyPrefillsLocally) {
  if (!staged()) GTEST_SKIP() << "a registered pool is written by the sender: nothing lands";
  Start(64);
  copier_->FailNextCopy(absl::InternalError("cuda copy: an illegal memory access"));
  const auto prompt = Prompt(22, 13);
  auto sink = Offload(prompt, 4, kOneWorker);
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->tokens(), Alone(prompt, 4));
  EXPECT_TRUE(sink->final().fell_back_to_local);
  EXPECT_EQ(sink->final().fallback_cause, "transfer_incomplete");
  ExpectBaseline();
}

TEST_P(OffloadCoordinatorTest, FailureAfterSomeLayersPrefillsLocallyIntoFreshBlocks) {
  Start(64);
  prefill_->faulty->SetPlan(FaultPlan{.fail_after_writes = 1});
  const auto prompt = Prompt(22, 2);
  auto sink = Offload(prompt, 6, kOneWorker);
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->tokens(), Alone(prompt, 6));
  const StreamSink::Final f = sink->final();
  EXPECT_FALSE(f.offloaded);
  EXPECT_TRUE(f.fell_back_to_local);
  EXPECT_GE(prefill_->faulty->injected_failures(), 1u);
  EXPECT_GE(client_->cancel_calls(), 1);  // The partly written blocks were quarantined first.
  ExpectBaseline();
}

TEST_P(OffloadCoordinatorTest, CompletionThatNeverArrivesTimesOutAndFallsBack) {
  OffloadConfig config;
  config.completion_timeout = absl::Seconds(5);
  Start(64, config);
  prefill_->faulty->SetPlan(FaultPlan{.drop_completion = true});
  const auto prompt = Prompt(22, 3);
  auto sink = Offload(prompt, 5, kOneWorker);
  // The call answers; the transfer never completes. Nothing happens until the timeout.
  ASSERT_TRUE(WaitOnLoop([this] { return loop_->scheduler().blocks()->counts().reserved > 0; }));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(coordinator_->offloads_in_progress(), 1);
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->tokens(), Alone(prompt, 5));
  EXPECT_EQ(sink->final().fallback_cause, "transfer_incomplete");
  ExpectBaseline();
}

TEST_P(OffloadCoordinatorTest, CancelMidTransferHoldsTheBlocksUntilThePrefillWorkerAcknowledges) {
  Start(64);
  client_->SetScript(
      "prefill-0", Script{.prefill = Script::OnPrefill::kHang, .cancel = Script::OnCancel::kHold});
  const auto prompt = Prompt(22, 4);  // 6 blocks.
  auto sink = Offload(prompt, 5, kOneWorker);
  ASSERT_TRUE(WaitOnLoop([this] { return loop_->scheduler().blocks()->counts().reserved == 6; }));
  sink->Cancel();
  loop_->Notify();
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->final().finish_reason, static_cast<int>(text::FinishReason::kCancelled));
  // The six blocks the worker may still write stay quarantined, however long it takes.
  ASSERT_TRUE(WaitOnLoop([this] { return client_->cancel_calls() == 1; }));
  clock_.Advance(absl::Seconds(30));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(Quarantined(), 6);
  client_->AckHeldCancels();
  ExpectBaseline();
}

TEST_P(OffloadCoordinatorTest, NoFreshBlocksSendsTheSequenceBackToWaitingUntilTheQuarantineEnds) {
  // 8 blocks: the prompt takes 6; after the failure they are quarantined and only 2 are free.
  Start(8);
  client_->SetScript(
      "prefill-0", Script{.prefill = Script::OnPrefill::kServe, .cancel = Script::OnCancel::kHold});
  prefill_->faulty->SetPlan(FaultPlan{.fail_after_writes = 1});
  const auto prompt = Prompt(22, 5);
  auto sink = Offload(prompt, 4, kOneWorker);
  if (staged()) {
    // Staged, the writer only ever targeted staging blocks: those are held, and the sequence
    // prefills locally in its own blocks at once.
    ASSERT_TRUE(sink->WaitFinished());
    EXPECT_EQ(sink->tokens(), Alone(prompt, 4));
    EXPECT_TRUE(sink->final().fell_back_to_local);
    EXPECT_EQ(Quarantined(), 6);
    client_->AckHeldCancels();
    ExpectBaseline();
    return;
  }
  ASSERT_TRUE(
      WaitOnLoop([this] { return loop_->scheduler().blocks()->counts().quarantined == 6; }));
  EXPECT_TRUE(WaitOnLoop([this] { return loop_->Stats().waiting == 1; }));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(sink->tokens().size(), 0u);  // It cannot run while the blocks are held.
  client_->AckHeldCancels();             // The writer stopped: the blocks come back.
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->tokens(), Alone(prompt, 4));
  EXPECT_TRUE(sink->final().fell_back_to_local);
  ExpectBaseline();
}

TEST_P(OffloadCoordinatorTest, StaleEpochIsRejectedByTheReceiverAndTheRequestPrefillsLocally) {
  Start(64);
  client_->SetScript("prefill-0", Script{.stale_epoch = true});
  const auto prompt = Prompt(22, 6);
  auto sink = Offload(prompt, 4, kOneWorker);
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->tokens(), Alone(prompt, 4));
  EXPECT_TRUE(sink->final().fell_back_to_local);
  EXPECT_GE(transport_->counters().rejected_stale_epoch, 1u);
  ExpectBaseline();
}

TEST_P(OffloadCoordinatorTest, RefusalBeforeWritingReusesTheBlocksAndTriesTheNextWorker) {
  Start(64);
  client_->SetScript("prefill-bad", Script{.prefill = Script::OnPrefill::kRefuse});
  const auto prompt = Prompt(22, 7);
  auto sink = Offload(prompt, 4, {{"prefill-bad", "bad:1"}, {"prefill-0", "prefill-0:1"}});
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->tokens(), Alone(prompt, 4));
  EXPECT_TRUE(sink->final().offloaded);
  EXPECT_EQ(sink->final().prefill_worker_id, "prefill-0");
  EXPECT_EQ(client_->prefill_calls(), 2);
  EXPECT_EQ(client_->cancel_calls(), 0);  // Nothing was written: no quarantine.
  ExpectBaseline();
}

TEST_P(OffloadCoordinatorTest, EveryWorkerRefusingEndsInLocalPrefillWithTheLastCause) {
  Start(64);
  client_->SetScript("prefill-bad", Script{.prefill = Script::OnPrefill::kRefuse});
  const auto prompt = Prompt(22, 8);
  auto sink = Offload(prompt, 4, {{"prefill-bad", "bad:1"}});
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->tokens(), Alone(prompt, 4));
  EXPECT_EQ(sink->final().fallback_cause, "layout_mismatch");
  ExpectBaseline();
}

TEST_P(OffloadCoordinatorTest, UnresponsiveWorkerFailsTheAttemptAtItsHealthCheckAndIsTakenAsGone) {
  OffloadConfig config;
  config.liveness_interval = absl::Milliseconds(500);
  config.dead_after = absl::Seconds(2);
  config.cancel_retry = absl::Milliseconds(200);
  Start(64, config);
  client_->SetScript("prefill-0", Script{.prefill = Script::OnPrefill::kHang,
                                         .cancel = Script::OnCancel::kUnavailable,
                                         .alive = false});
  const auto prompt = Prompt(22, 9);
  auto sink = Offload(prompt, 4, kOneWorker);
  ASSERT_TRUE(WaitOnLoop([this] { return loop_->scheduler().blocks()->counts().reserved == 6; }));
  EXPECT_EQ(client_->alive_calls(), 0);
  clock_.Advance(absl::Milliseconds(600));  // The first health check is due, and fails.
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->tokens(), Alone(prompt, 4));
  EXPECT_EQ(sink->final().fallback_cause, "prefill_unresponsive");
  // Its blocks stay quarantined while it refuses connections for less than dead_after
  // (cancels retried every 200 ms)...
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Milliseconds(300));
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(Quarantined(), 6);
  // ...and are freed once it has for longer.
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Milliseconds(300));
    absl::SleepFor(absl::Milliseconds(50));
  }
  ExpectBaseline();
  EXPECT_GE(client_->cancel_calls(), 3);
}

TEST_P(OffloadCoordinatorTest, StoppedWorkerKeepsItsBlocksUntilItsWritingDeadlinePassed) {
  OffloadConfig config;
  config.attempt_timeout = absl::Seconds(10);
  config.dead_after = absl::Seconds(2);
  Start(64, config);
  // Accepts connections but answers nothing (SIGSTOP): only its deadline bounds its writes.
  client_->SetScript("prefill-0", Script{.prefill = Script::OnPrefill::kHang,
                                         .cancel = Script::OnCancel::kTimeout,
                                         .alive = false});
  const auto prompt = Prompt(22, 10);
  auto sink = Offload(prompt, 4, kOneWorker);
  ASSERT_TRUE(WaitOnLoop([this] { return loop_->scheduler().blocks()->counts().reserved == 6; }));
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->tokens(), Alone(prompt, 4));
  // Past dead_after of unanswered cancels, but not past the attempt's deadline + dead_after.
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(absl::Milliseconds(500));
    absl::SleepFor(absl::Milliseconds(30));
  }
  EXPECT_EQ(Quarantined(), 6);
  clock_.Advance(absl::Seconds(7));  // Now 13 s after the attempt began (10 s + 2 s margin).
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Milliseconds(300));
    absl::SleepFor(absl::Milliseconds(30));
  }
  ExpectBaseline();
}

// A prefill worker alive (its health check answers) but too slow once held the request for
// the whole attempt timeout (60 s) and then its deadline. The attempt now ends at the TTFT
// objective (or twice the router's prediction, if later), and the request prefills locally:
// its first token comes within the objective plus the local prefill time.
TEST_P(OffloadCoordinatorTest, AnAliveButSlowWorkerIsAbandonedAtTheTtftObjective) {
  OffloadConfig config;
  config.attempt_timeout = absl::Seconds(60);
  Start(64, config);
  client_->SetScript(
      "prefill-0",
      Script{.prefill = Script::OnPrefill::kHang, .cancel = Script::OnCancel::kAck, .alive = true});
  const auto prompt = Prompt(22, 15);
  const absl::Time start = clock_.Now();
  auto within_ttft = OffloadWithin(prompt, 4, kOneWorker,
                                   {.deadline = start + absl::Hours(1),
                                    .ttft_deadline = start + absl::Seconds(2),
                                    .predicted = absl::Milliseconds(300)});
  const auto other = Prompt(22, 16);
  auto without_ttft = Offload(other, 4, kOneWorker);  // No objective: the attempt timeout.
  ASSERT_TRUE(WaitOnLoop([this] { return coordinator_->offloads_in_progress() == 2; }));
  for (int i = 0; i < 5; ++i) {  // 2.5 s: past the objective, well before 60 s.
    clock_.Advance(absl::Milliseconds(500));
    absl::SleepFor(absl::Milliseconds(30));
  }
  ASSERT_TRUE(within_ttft->WaitFinished());
  EXPECT_EQ(within_ttft->tokens(), Alone(prompt, 4));
  EXPECT_EQ(within_ttft->final().fallback_cause, "ttft_budget");
  EXPECT_FALSE(without_ttft->finished()) << "an offload without an objective was cut short";
  EXPECT_EQ(client_->prefill_calls(), 2);
  // The attempt timeout still bounds the other.
  clock_.Advance(absl::Seconds(58));
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Milliseconds(300));
    absl::SleepFor(absl::Milliseconds(30));
  }
  ASSERT_TRUE(without_ttft->WaitFinished());
  EXPECT_EQ(without_ttft->tokens(), Alone(other, 4));
  ExpectBaseline();
}

TEST_P(OffloadCoordinatorTest, TooLittleDeadlineLeftPrefillsLocallyWithoutCallingAWorker) {
  OffloadConfig config;
  config.min_attempt_budget = absl::Seconds(1);
  Start(64, config);
  const auto prompt = Prompt(22, 11);
  auto sink = Offload(prompt, 4, kOneWorker, absl::Milliseconds(500));
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->tokens(), Alone(prompt, 4));
  EXPECT_EQ(sink->final().fallback_cause, "prefill_deadline");
  EXPECT_EQ(client_->prefill_calls(), 0);
  ExpectBaseline();
}

// An offload that finds too few free blocks waits for them as an offload: it is not prefilled
// in local chunks beside the streams the router sent it away from.
TEST_P(OffloadCoordinatorTest, PoolTooFullForThePromptWaitsForBlocksAsAnOffload) {
  Start(8);
  // A local sequence whose client stopped reading holds 6 of the 8 blocks; the offloaded
  // prompt needs 6.
  auto first = std::make_shared<RecordingSink>();
  first->SetUnread(1 << 20);
  const auto long_prompt = Prompt(22, 12);
  ASSERT_TRUE(loop_->Submit(MakeSequence(long_prompt, 3, first)).ok());
  ASSERT_TRUE(WaitOnLoop([this] { return loop_->scheduler().blocks()->counts().in_use >= 6; }));
  const auto prompt = Prompt(21, 13);
  auto sink = Offload(prompt, 2, kOneWorker);
  ASSERT_TRUE(WaitOnLoop([this] { return loop_->Stats().waiting + loop_->Stats().running == 2; }));
  // Waiting: no blocks, no call, and not the worker's own prefill backlog.
  ASSERT_TRUE(WaitOnLoop([this] {
    return loop_->scheduler().num_waiting() == 1 && loop_->scheduler().num_awaiting_kv() == 0 &&
           loop_->scheduler().pending_prefill().tokens == 0;
  }));
  EXPECT_EQ(client_->prefill_calls(), 0);
  first->SetUnread(0);
  loop_->Notify();
  ASSERT_TRUE(first->WaitFinished());
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->tokens(), Alone(prompt, 2));
  EXPECT_EQ(first->tokens(), Alone(long_prompt, 3));
  EXPECT_FALSE(sink->final().fell_back_to_local) << sink->final().fallback_cause;
  EXPECT_EQ(client_->prefill_calls(), 1);
  ExpectBaseline();
}

TEST_P(OffloadCoordinatorTest, OffloadsBeyondMaxAwaitingKvRunLocallyAndSayWhy) {
  max_awaiting_kv_ = 1;
  Start(64);
  client_->SetScript("prefill-0",
                     Script{.prefill = Script::OnPrefill::kHang, .cancel = Script::OnCancel::kAck});
  const auto held_prompt = Prompt(22, 4);
  auto held = Offload(held_prompt, 3, kOneWorker);
  ASSERT_TRUE(WaitOnLoop([this] { return loop_->scheduler().num_awaiting_kv() == 1; }));
  // Blocks are plenty; the one place for an offload awaiting its KV is taken.
  const auto prompt = Prompt(21, 13);
  auto sink = Offload(prompt, 2, kOneWorker);
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->tokens(), Alone(prompt, 2));
  EXPECT_EQ(sink->final().fallback_cause, "awaiting_kv_full");
  EXPECT_EQ(client_->prefill_calls(), 1);
  held->Cancel();
  loop_->Notify();
  ASSERT_TRUE(held->WaitFinished());
  ExpectBaseline();
}

// Leaving the decode role (a role switch), the worker hands back to the router what has given
// its client nothing: an offload awaiting its KV at once (its transfer cancelled, its blocks
// held until the prefill worker says it stopped), while a stream that has started stays and
// finishes with its own tokens. Nothing new is taken.
TEST_P(OffloadCoordinatorTest, LeavingTheDecodeRoleHandsBackOffloadsAwaitingKvAndFinishesStreams) {
  Start(64);
  client_->SetScript(
      "prefill-0", Script{.prefill = Script::OnPrefill::kHang, .cancel = Script::OnCancel::kHold});
  // A stream with its first token sent, paused while its client reads nothing.
  auto started = std::make_shared<RecordingSink>();
  started->SetUnread(1 << 20);
  const auto started_prompt = Prompt(9, 21);
  ASSERT_TRUE(loop_->Submit(MakeSequence(started_prompt, 5, started)).ok());
  ASSERT_TRUE(WaitOnLoop([&] { return started->tokens().size() == 1; }));
  auto awaiting = Offload(Prompt(22, 22), 4, kOneWorker);  // 6 blocks.
  ASSERT_TRUE(WaitOnLoop([this] { return loop_->scheduler().num_awaiting_kv() == 1; }));

  loop_->BeginDrainHandingBack();
  ASSERT_TRUE(awaiting->WaitFinished());
  EXPECT_TRUE(absl::StrContains(awaiting->handed_back(), "handed the request back"))
      << awaiting->handed_back();
  EXPECT_TRUE(awaiting->tokens().empty());
  EXPECT_EQ(metrics_->requests_handed_back.Value(), 1);
  ASSERT_TRUE(WaitOnLoop([this] { return client_->cancel_calls() == 1; }));
  if (!staged()) {  // Staged, the writer only ever targeted staging blocks.
    EXPECT_EQ(Quarantined(), 6);
  }
  EXPECT_FALSE(started->finished());
  // New requests are refused, marked for the router to place them elsewhere at once.
  const absl::Status refused =
      loop_->Submit(MakeSequence(Prompt(5, 23), 2, std::make_shared<RecordingSink>()));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsHandedBack(refused)) << refused;

  started->SetUnread(0);
  loop_->Notify();
  ASSERT_TRUE(started->WaitFinished());
  EXPECT_EQ(started->tokens(), Alone(started_prompt, 5));
  EXPECT_TRUE(started->handed_back().empty());
  EXPECT_EQ(metrics_->requests_handed_back.Value(), 1);
  client_->AckHeldCancels();
  ExpectBaseline();
}

// An offload still waiting for blocks, and before the order it was never called out: handed
// back without a call to any prefill worker.
TEST_P(OffloadCoordinatorTest, LeavingTheDecodeRoleHandsBackAnOffloadWaitingForBlocks) {
  Start(8);
  auto first = std::make_shared<RecordingSink>();
  first->SetUnread(1 << 20);
  const auto long_prompt = Prompt(22, 24);  // 6 of the 8 blocks.
  ASSERT_TRUE(loop_->Submit(MakeSequence(long_prompt, 3, first)).ok());
  ASSERT_TRUE(WaitOnLoop([&] { return first->tokens().size() == 1; }));
  auto waiting = Offload(Prompt(21, 25), 2, kOneWorker);  // Needs 6.
  ASSERT_TRUE(WaitOnLoop([this] { return loop_->scheduler().num_waiting() == 1; }));

  loop_->BeginDrainHandingBack();
  ASSERT_TRUE(waiting->WaitFinished());
  EXPECT_FALSE(waiting->handed_back().empty());
  EXPECT_EQ(client_->prefill_calls(), 0);
  first->SetUnread(0);
  loop_->Notify();
  ASSERT_TRUE(first->WaitFinished());
  EXPECT_EQ(first->tokens(), Alone(long_prompt, 3));
  ExpectBaseline();
}

TEST_P(OffloadCoordinatorTest, ShutdownWithAnAttemptInFlightCancelsIt) {
  Start(64);
  client_->SetScript(
      "prefill-0", Script{.prefill = Script::OnPrefill::kHang, .cancel = Script::OnCancel::kHold});
  auto sink = Offload(Prompt(22, 14), 4, kOneWorker);
  ASSERT_TRUE(WaitOnLoop([this] { return coordinator_->offloads_in_progress() == 1; }));
  loop_->Stop();         // Sequences still present finish with an error.
  coordinator_.reset();  // Cancels the hung call; must not wait for it forever.
  EXPECT_TRUE(sink->WaitFinished());
}

// Every timing flag is checked, and its error names the flag.
TEST(OffloadConfigTest, InvalidTimingsNameTheirFlag) {
  EXPECT_TRUE(OffloadConfig().Validate().ok());
  const std::vector<std::pair<std::string, std::function<void(OffloadConfig*)>>> cases = {
      {"--offload_attempt_timeout",
       [](OffloadConfig* c) { c->attempt_timeout = absl::ZeroDuration(); }},
      {"--offload_completion_timeout",
       [](OffloadConfig* c) { c->completion_timeout = -absl::Seconds(1); }},
      {"--offload_dead_after", [](OffloadConfig* c) { c->dead_after = absl::ZeroDuration(); }},
      {"--offload_cancel_retry", [](OffloadConfig* c) { c->cancel_retry = absl::ZeroDuration(); }},
      {"--offload_liveness_interval",
       [](OffloadConfig* c) { c->liveness_interval = absl::ZeroDuration(); }},
      {"--offload_liveness_timeout",
       [](OffloadConfig* c) { c->liveness_timeout = absl::ZeroDuration(); }},
      {"--offload_min_attempt_budget",
       [](OffloadConfig* c) { c->min_attempt_budget = -absl::Seconds(1); }},
  };
  for (const auto& [flag, edit] : cases) {
    OffloadConfig c;
    edit(&c);
    const absl::Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_TRUE(absl::StrContains(s.message(), flag)) << s;
  }
}

}  // namespace
}  // namespace pdserve::decode
