// The scheduler's decisions as tables of expected plans, without a model: admission with
// too few blocks, chunk budget, priority order, preemption order, prefix reuse, backpressure,
// and block accounting that always returns to "all free or cached".
#include "decode_worker/scheduler.h"

#include <functional>
#include <numeric>

#include "decode_worker/step_report.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvcache/block_hash.h"

namespace pdserve::decode {
namespace {

constexpr int kBlock = 4;

class FakeSink : public StreamSink {
 public:
  void PushTokens(const std::vector<int32_t>& ids, const std::string&, int64_t) override {
    pending += ids.size();
  }
  void Finish(const Final&) override {}
  void HandBack(const std::string&) override {}
  int pending_tokens() const override { return pending; }
  bool cancelled() const override { return false; }
  int pending = 0;
};

// A chunk as a compact string: "A:0+8" = sequence A, start 0, 8 tokens; "*" marks logits.
std::string Describe(const PlannedChunk& c) {
  return c.seq->request_id + ":" + std::to_string(c.start) + "+" + std::to_string(c.num_tokens) +
         (c.want_logits ? "*" : "");
}

class SchedulerTest : public ::testing::Test {
 protected:
  void Init(int blocks, int budget, int max_seqs = 16, int max_awaiting_kv = 16) {
    blocks_ = std::make_unique<kvcache::BlockManager>(blocks);
    SchedulerConfig config;
    config.block_size = kBlock;
    config.max_num_batched_tokens = budget;
    config.max_num_seqs = max_seqs;
    config.max_awaiting_kv = max_awaiting_kv;
    config.max_waiting = 4;
    config.model_fingerprint = 99;
    ASSERT_TRUE(config.Validate().ok());
    scheduler_ = std::make_unique<Scheduler>(config, blocks_.get());
  }
  Sequence* Add(const std::string& id, int prompt_len, int priority = 0, int first_token = 0) {
    auto seq = std::make_unique<Sequence>();
    seq->request_id = id;
    seq->priority = priority;
    seq->order = ++order_;
    seq->tokens.resize(prompt_len);
    std::iota(seq->tokens.begin(), seq->tokens.end(), first_token);
    seq->prompt_len = prompt_len;
    Sequence* raw = seq.get();
    scheduler_->Add(std::move(seq));
    return raw;
  }
  // Plans and applies one step (every logits row samples token 1000); returns the chunks.
  std::vector<std::string> Step(StepPlan* out = nullptr) {
    StepPlan plan = scheduler_->PlanStep();
    std::vector<std::string> described;
    std::vector<int32_t> sampled;
    for (const PlannedChunk& c : plan.chunks) {
      described.push_back(Describe(c));
      if (c.want_logits) sampled.push_back(1000);
    }
    scheduler_->ApplyStep(plan, sampled);
    if (out) *out = plan;
    return described;
  }
  void ExpectAllFreeOrCached() {
    const kvcache::BlockCounts c = blocks_->counts();
    EXPECT_EQ(c.in_use, 0);
    EXPECT_EQ(c.free + c.cached, c.total);
  }

  std::unique_ptr<kvcache::BlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;
  uint64_t order_ = 0;
};

using ::testing::ElementsAre;

TEST_F(SchedulerTest, ChunkedPrefillCoBatchedWithDecodes) {
  Init(/*blocks=*/64, /*budget=*/8);
  Add("A", 20);
  EXPECT_THAT(Step(), ElementsAre("A:0+8"));
  Add("D", 3);
  // A continues (7 tokens after D's... D is admitted after running chunks, with what is left).
  EXPECT_THAT(Step(), ElementsAre("A:8+8"));
  EXPECT_THAT(Step(), ElementsAre("A:16+4*", "D:0+3*"));
  // Both decode now: one token each.
  EXPECT_THAT(Step(), ElementsAre("A:20+1*", "D:3+1*"));
  EXPECT_EQ(scheduler_->counters().preemptions, 0u);
}

TEST_F(SchedulerTest, DecodesComeFirstThenPrefillChunksWithinTheBudget) {
  Init(64, 6);
  Add("D", 2);
  EXPECT_THAT(Step(), ElementsAre("D:0+2*"));
  Add("P", 10);
  EXPECT_THAT(Step(), ElementsAre("D:2+1*", "P:0+5"));
  EXPECT_THAT(Step(), ElementsAre("D:3+1*", "P:5+5*"));
}

TEST_F(SchedulerTest, AdmissionNeedsBlocksForTheUncachedPromptPlusOneToken) {
  Init(/*blocks=*/10, /*budget=*/64);
  Sequence* a = Add("A", 30);            // ceil(31/4) = 8 blocks.
  Add("B", 10, 0, /*first_token=*/500);  // 3 blocks: only 2 left.
  EXPECT_THAT(Step(), ElementsAre("A:0+30*"));
  EXPECT_EQ(scheduler_->num_waiting(), 1);
  EXPECT_EQ(blocks_->counts().in_use, 8);
  scheduler_->Finish(a);
  EXPECT_THAT(Step(), ElementsAre("B:0+10*"));
}

TEST_F(SchedulerTest, WaitingQueueIsPriorityThenArrival) {
  Init(64, 64, /*max_seqs=*/1);
  Add("low", 4, 0);
  Add("high", 4, 5);
  Add("low2", 4, 0);
  EXPECT_THAT(Step(), ElementsAre("high:0+4*"));
  EXPECT_THAT(scheduler_->waiting().front()->request_id, "low");
}

TEST_F(SchedulerTest, WaitingRequestsAreTakenClientByClient) {
  Init(64, 64, /*max_seqs=*/2);
  std::vector<Sequence*> greedy;
  for (int i = 0; i < 4; ++i) {
    greedy.push_back(Add("g" + std::to_string(i), 4, 0, 100 * i));
    greedy.back()->client = "addr:10.0.0.1";
  }
  Sequence* polite = Add("p", 4, 0, 900);
  polite->client = "addr:10.0.0.2";
  Sequence* urgent = Add("u", 4, /*priority=*/1, 950);
  urgent->client = "addr:10.0.0.1";
  // Priority first, whoever sent it; then the greedy client runs one and the polite one
  // none, so the polite request goes before the greedy client's four earlier ones.
  EXPECT_THAT(Step(), ElementsAre("u:0+4*", "p:0+4*"));
  scheduler_->Finish(urgent);
  EXPECT_THAT(Step(), ElementsAre("p:4+1*", "g0:0+4*"));
  // Each runs one: a freed slot goes to the client that runs fewer.
  scheduler_->Finish(greedy[0]);
  EXPECT_THAT(Step(), ElementsAre("p:5+1*", "g1:0+4*"));
  Sequence* polite2 = Add("p2", 4, 0, 990);
  polite2->client = "addr:10.0.0.2";
  scheduler_->Finish(polite);
  EXPECT_THAT(Step(), ElementsAre("g1:4+1*", "p2:0+4*"));
  EXPECT_EQ(scheduler_->waiting().front(), greedy[2]);
  for (Sequence* s : std::vector<Sequence*>(scheduler_->running())) scheduler_->Finish(s);
  ExpectAllFreeOrCached();
}

TEST_F(SchedulerTest, AClientHoldingEverySlotGivesOneUpToAnotherClient) {
  Init(64, 64, /*max_seqs=*/2);
  Sequence* g0 = Add("g0", 4, 0, 0);
  Sequence* g1 = Add("g1", 4, 0, 100);
  g0->client = g1->client = "addr:greedy";
  EXPECT_THAT(Step(), ElementsAre("g0:0+4*", "g1:0+4*"));
  Sequence* p = Add("p", 4, 0, 200);
  p->client = "addr:polite";
  // The greedy client runs two, the polite one none: its newest goes back to waiting.
  StepPlan plan;
  EXPECT_THAT(Step(&plan), ElementsAre("g0:4+1*", "p:0+4*"));
  EXPECT_THAT(plan.preempted, ElementsAre(g1));
  EXPECT_EQ(g1->state, SequenceState::kWaiting);
  EXPECT_EQ(scheduler_->counters().fairness_preemptions, 1u);
  // One each: nobody gives way (that would only swap who is ahead).
  Sequence* g2 = Add("g2", 4, 0, 300);
  g2->client = "addr:greedy";
  EXPECT_THAT(Step(), ElementsAre("g0:5+1*", "p:4+1*"));
  EXPECT_EQ(scheduler_->counters().fairness_preemptions, 1u);
  // The one given up is the busiest client's lowest-priority newest (never one of higher
  // priority than the waiting request).
  scheduler_->Finish(p);
  Sequence* hi = Add("hi", 4, /*priority=*/2, 400);
  hi->client = "addr:greedy";
  Step();  // g1 (greedy's earliest) fills the free slot.
  Sequence* low = Add("low", 4, 0, 500);
  low->client = "addr:polite";
  EXPECT_THAT(Step(), ElementsAre("hi:4+1*", "low:0+4*"));
  EXPECT_EQ(hi->state, SequenceState::kRunning);
  EXPECT_EQ(g0->state, SequenceState::kWaiting);
  EXPECT_EQ(scheduler_->counters().fairness_preemptions, 2u);
  for (Sequence* s : std::vector<Sequence*>(scheduler_->running())) scheduler_->Finish(s);
  for (Sequence* s : scheduler_->waiting()) scheduler_->Finish(s);
  ExpectAllFreeOrCached();
}

TEST_F(SchedulerTest, AWaitingSequenceWhoseClientReadsNothingIsNotAdmitted) {
  Init(64, 64);
  Sequence* unread = Add("unread", 4, 0, 0);
  auto sink = std::make_shared<FakeSink>();
  unread->sink = sink;
  EXPECT_THAT(Step(), ElementsAre("unread:0+4*"));
  EXPECT_THAT(Step(), ElementsAre("unread:4+1*"));
  scheduler_->ReturnToWaiting(unread);  // Preempted, say, with two tokens generated...
  sink->pending = 10000;                // ...and its client reads nothing.
  Add("next", 4, 0, 100);
  EXPECT_THAT(Step(), ElementsAre("next:0+4*"));
  EXPECT_EQ(unread->state, SequenceState::kWaiting);
  sink->pending = 0;                                             // Its client read.
  EXPECT_THAT(Step(), ElementsAre("next:4+1*", "unread:4+2*"));  // Its first block is cached.
}

TEST_F(SchedulerTest, PreemptsTheLowestPriorityNewestWhenBlocksRunOut) {
  Init(/*blocks=*/6, /*budget=*/64);
  Sequence* hi = Add("hi", 7, 1, 0);         // 2 blocks (7 + 1 tokens).
  Sequence* old_lo = Add("lo1", 7, 0, 100);  // 2 blocks.
  Sequence* new_lo = Add("lo2", 7, 0, 200);  // 2 blocks: the pool is full.
  EXPECT_THAT(Step(), ElementsAre("hi:0+7*", "lo1:0+7*", "lo2:0+7*"));
  // Decoding position 7 fits (blocks cover 8); position 8 needs a third block each.
  EXPECT_THAT(Step(), ElementsAre("hi:7+1*", "lo1:7+1*", "lo2:7+1*"));
  StepPlan plan;
  const auto chunks = Step(&plan);
  // hi needs a block: lo2 (lowest priority, newest) is preempted, which frees two; lo1
  // then fits.
  ASSERT_EQ(plan.preempted.size(), 1u);
  EXPECT_EQ(plan.preempted.front(), new_lo);
  EXPECT_EQ(new_lo->state, SequenceState::kWaiting);
  EXPECT_EQ(new_lo->num_computed, 0);
  EXPECT_EQ(new_lo->preemptions, 1);
  EXPECT_THAT(chunks, ElementsAre("hi:8+1*", "lo1:8+1*"));
  EXPECT_EQ(hi->state, SequenceState::kRunning);
  EXPECT_EQ(old_lo->state, SequenceState::kRunning);
  EXPECT_EQ(scheduler_->counters().preemptions, 1u);
  // The preempted sequence recomputes everything it had (7 prompt + 2 generated tokens):
  // the cached blocks it released were exactly the ones evicted to make room.
  for (Sequence* s : std::vector<Sequence*>(scheduler_->running())) scheduler_->Finish(s);
  EXPECT_EQ(new_lo->num_tokens(), 9);
  EXPECT_THAT(Step(), ElementsAre("lo2:0+9*"));
}

TEST_F(SchedulerTest, PrefixCacheReuseSkipsCachedBlocks) {
  Init(64, 64);
  Sequence* a = Add("A", 12);  // Tokens 0..11: 3 full blocks.
  Step();
  // A's first 3 blocks are full (12 tokens computed) and published.
  EXPECT_EQ(a->block_hashes.size(), 3u);
  scheduler_->Finish(a);
  EXPECT_EQ(blocks_->counts().cached, 3);
  // B shares the first 8 tokens (2 blocks), then differs.
  auto b_tokens = std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 50, 51, 52};
  Sequence* b = Add("B", 11);
  b->tokens = b_tokens;
  EXPECT_THAT(Step(), ElementsAre("B:8+3*"));
  EXPECT_EQ(b->cached_prompt_tokens, 8);
  EXPECT_EQ(scheduler_->counters().prefix_hit_tokens, 8u);
  EXPECT_EQ(scheduler_->counters().prefix_queried_tokens, 12u + 11u);
  // A fully cached prompt still computes its last block (to sample from its logits).
  scheduler_->Finish(b);
  Sequence* c = Add("C", 12);
  EXPECT_THAT(Step(), ElementsAre("C:8+4*"));
  scheduler_->Finish(c);
  ExpectAllFreeOrCached();
}

TEST_F(SchedulerTest, PausesASequenceWhoseClientIsBehind) {
  Init(64, 64);
  Sequence* s = Add("S", 4);
  auto sink = std::make_shared<FakeSink>();
  s->sink = sink;
  EXPECT_THAT(Step(), ElementsAre("S:0+4*"));
  sink->pending = 300;  // Over max_pending_tokens (256).
  EXPECT_TRUE(Step().empty());
  sink->pending = 0;
  EXPECT_THAT(Step(), ElementsAre("S:4+1*"));
}

// A client that reads nothing must not keep its blocks while others need them: its paused
// sequence is preempted first, whatever its priority.
TEST_F(SchedulerTest, APausedSequenceIsTheFirstToBePreempted) {
  Init(/*blocks=*/6, /*budget=*/64);
  Sequence* slow = Add("slow", 7, /*priority=*/5, 0);
  Add("a", 7, 0, 100);
  Add("b", 7, 0, 200);
  auto sink = std::make_shared<FakeSink>();
  slow->sink = sink;
  EXPECT_THAT(Step(), ElementsAre("slow:0+7*", "a:0+7*", "b:0+7*"));
  EXPECT_THAT(Step(), ElementsAre("slow:7+1*", "a:7+1*", "b:7+1*"));
  sink->pending = 300;  // Its client stopped reading.
  EXPECT_TRUE(scheduler_->IsPaused(slow));
  StepPlan plan;
  EXPECT_THAT(Step(&plan), ElementsAre("a:8+1*", "b:8+1*"));
  ASSERT_EQ(plan.preempted.size(), 1u);
  EXPECT_EQ(plan.preempted.front(), slow);
}

TEST_F(SchedulerTest, AccountingReturnsToFreeOrCachedWhenIdle) {
  Init(20, 16, /*max_seqs=*/3);
  std::vector<Sequence*> seqs;
  for (int i = 0; i < 4; ++i)
    seqs.push_back(Add("s" + std::to_string(i), 5 + i * 3, i % 2, i * 100));
  for (int step = 0; step < 30; ++step) {
    Step();
    const kvcache::BlockCounts c = blocks_->counts();
    EXPECT_EQ(c.free + c.cached + c.in_use + c.reserved + c.quarantined, c.total);
  }
  while (!scheduler_->running().empty()) scheduler_->Finish(scheduler_->running().front());
  for (Sequence* s : scheduler_->waiting()) scheduler_->Finish(s);
  ExpectAllFreeOrCached();
}

// Every planned chunk's positions are covered by its sequence's block table, and the block
// counts add up: what the engine forward relies on.
void ExpectPlanCovered(const StepPlan& plan, const kvcache::BlockManager& blocks) {
  for (const PlannedChunk& c : plan.chunks) {
    EXPECT_GE(static_cast<int>(c.seq->block_table.size()) * kBlock, c.start + c.num_tokens)
        << Describe(c) << " has " << c.seq->block_table.size() << " blocks";
  }
  const kvcache::BlockCounts n = blocks.counts();
  EXPECT_EQ(n.free + n.cached + n.in_use + n.reserved + n.quarantined, n.total);
}

TEST_F(SchedulerTest, CachedBlocksAnAdmissionPinsAreNotCountedAsFreeToo) {
  Init(/*blocks=*/5, /*budget=*/64);
  Sequence* a = Add("A", 12);  // 4 blocks; 3 full ones published.
  Step();
  scheduler_->Finish(a);
  ASSERT_EQ(blocks_->counts().cached, 3);
  ASSERT_EQ(blocks_->counts().free, 2);
  // B shares A's 12 tokens: it pins the 3 cached blocks and needs ceil(21/4) - 3 = 3 new
  // ones, but only the 2 free blocks remain once the cached ones are pinned.
  Sequence* b = Add("B", 20);
  StepPlan plan;
  EXPECT_TRUE(Step(&plan).empty());
  ExpectPlanCovered(plan, *blocks_);
  EXPECT_EQ(b->state, SequenceState::kWaiting);
  EXPECT_TRUE(b->block_table.empty());
  EXPECT_EQ(blocks_->counts().cached, 3);
  EXPECT_EQ(blocks_->counts().free, 2);
  // The offload admission path makes the same decision.
  EXPECT_FALSE(scheduler_->AdmitForTransfer(b));
  EXPECT_EQ(blocks_->counts().in_use, 0);
  scheduler_->Finish(b);
  ExpectAllFreeOrCached();
}

// Many prompts sharing prefixes on a pool too small for all of them (the fault that failed
// whole batches with "needs N blocks, its block table has N-1"): preemptions, prefix hits and
// re-admissions, and every plan stays covered.
TEST_F(SchedulerTest, KvExhaustionWithPrefixCachingNeverPlansAShortBlockTable) {
  for (bool prefix_caching : {true, false}) {
    SCOPED_TRACE(prefix_caching ? "prefix caching" : "no prefix caching");
    blocks_ = std::make_unique<kvcache::BlockManager>(24);
    SchedulerConfig config;
    config.block_size = kBlock;
    config.max_num_batched_tokens = 32;
    config.max_num_seqs = 16;
    config.max_waiting = 64;
    config.enable_prefix_caching = prefix_caching;
    config.model_fingerprint = 99;
    scheduler_ = std::make_unique<Scheduler>(config, blocks_.get());
    std::vector<Sequence*> seqs;
    for (int i = 0; i < 6; ++i)
      seqs.push_back(Add("s" + std::to_string(i), 18 + 4 * (i % 3), 0, 0));
    int finished = 0;
    for (int step = 0; step < 400 && finished < 6; ++step) {
      StepPlan plan;
      Step(&plan);
      ExpectPlanCovered(plan, *blocks_);
      if (HasFailure()) return;
      for (Sequence* s : std::vector<Sequence*>(scheduler_->running())) {
        if (s->generated() >= 20) {
          scheduler_->Finish(s);
          ++finished;
        }
      }
    }
    EXPECT_EQ(finished, 6);
    if (prefix_caching) {
      EXPECT_GT(scheduler_->counters().preemptions, 0u);
    }
    ExpectAllFreeOrCached();
  }
}

// Offload admissions (AWAITING_KV) as a table: what each call leaves in the scheduler.
// An offload that waits for blocks (on_admitted_for_transfer) is admitted AWAITING_KV when
// they free, never in local chunks, and is not counted as local prefill backlog meanwhile.
TEST_F(SchedulerTest, AWaitingOffloadIsAdmittedForItsTransferNotLocally) {
  Init(/*blocks=*/6, /*budget=*/64);
  Sequence* a = Add("A", 16);  // 5 blocks with its first output token.
  EXPECT_EQ(Step(), (std::vector<std::string>{"A:0+16*"}));
  Sequence* b = Add("B", 12);  // 4 blocks: only 1 free.
  int handed_over = 0;
  EXPECT_EQ(scheduler_->AdmitOrAwaitTransfer(b,
                                             [&](Sequence* seq) {
                                               EXPECT_EQ(seq, b);
                                               ++handed_over;
                                             }),
            Scheduler::TransferAdmission::kWaitingForBlocks);
  EXPECT_EQ(b->state, SequenceState::kWaiting);
  EXPECT_EQ(scheduler_->pending_prefill().tokens, 0);
  StepPlan plan;
  EXPECT_EQ(Step(&plan), (std::vector<std::string>{"A:16+1*"}));
  EXPECT_TRUE(plan.admitted_for_transfer.empty());
  EXPECT_EQ(b->state, SequenceState::kWaiting);
  scheduler_->Finish(a);
  EXPECT_TRUE(Step(&plan).empty());  // No chunk of B: it is admitted for its transfer.
  ASSERT_EQ(plan.admitted_for_transfer, (std::vector<Sequence*>{b}));
  EXPECT_EQ(b->state, SequenceState::kAwaitingKv);
  EXPECT_EQ(b->block_table.size(), 4u);
  HandOverTransferAdmissions(plan);
  HandOverTransferAdmissions(plan);  // Once only.
  EXPECT_EQ(handed_over, 1);
  EXPECT_FALSE(b->on_admitted_for_transfer);
  scheduler_->Finish(b);
  ExpectAllFreeOrCached();
}

TEST_F(SchedulerTest, AdmitForTransferTransferDoneAndReturnToWaiting) {
  Init(/*blocks=*/16, /*budget=*/64, /*max_seqs=*/2, /*max_awaiting_kv=*/2);
  Sequence* a = Add("A", 9);          // ceil(10/4) = 3 blocks.
  Sequence* b = Add("B", 5, 0, 100);  // 2 blocks.
  Sequence* c = Add("C", 5, 0, 200);
  struct Row {
    const char* what;
    std::function<bool()> call;
    bool result;
    SequenceState state;
    int running, waiting, awaiting, in_use;
  };
  const std::vector<Row> rows = {
      {"A admitted awaiting KV", [&] { return scheduler_->AdmitForTransfer(a); }, true,
       SequenceState::kAwaitingKv, 0, 2, 1, 3},
      {"B admitted awaiting KV", [&] { return scheduler_->AdmitForTransfer(b); }, true,
       SequenceState::kAwaitingKv, 0, 1, 2, 5},
      {"C refused: max_awaiting_kv", [&] { return scheduler_->AdmitForTransfer(c); }, false,
       SequenceState::kWaiting, 0, 1, 2, 5},
      {"A's transfer delivered its prompt",
       [&] {
         scheduler_->TransferDone(a, 9);
         return true;
       },
       true, SequenceState::kRunning, 1, 1, 1, 5},
      {"B back to waiting",
       [&] {
         scheduler_->ReturnToWaiting(b);
         return true;
       },
       true, SequenceState::kWaiting, 1, 2, 0, 3},
  };
  Sequence* subject[] = {a, b, c, a, b};
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    SCOPED_TRACE(r.what);
    EXPECT_EQ(r.call(), r.result);
    EXPECT_EQ(subject[i]->state, r.state);
    EXPECT_EQ(scheduler_->num_running(), r.running);
    EXPECT_EQ(scheduler_->num_waiting(), r.waiting);
    EXPECT_EQ(scheduler_->num_awaiting_kv(), r.awaiting);
    EXPECT_EQ(blocks_->counts().in_use, r.in_use);
  }
  // A decodes from its whole prompt (its first token is appended by the caller); B is
  // admitted again locally and recomputes its prompt.
  a->tokens.push_back(7);
  EXPECT_THAT(Step(), ElementsAre("A:9+1*", "B:0+5*"));
  // A prompt counts once in the prefix-cache statistics, however often it is admitted.
  EXPECT_EQ(scheduler_->counters().prefix_queried_tokens, 9u + 5u);
  for (Sequence* s : std::vector<Sequence*>(scheduler_->running())) scheduler_->Finish(s);
  scheduler_->Finish(c);
  ExpectAllFreeOrCached();
}

// Sequences awaiting KV hold blocks, not places in the batch: an offload is admitted while the
// batch is full, and its transfer completes into it; the plan still steps max_num_seqs, and
// nothing new is admitted until fewer run.
TEST_F(SchedulerTest, AwaitingKvDoesNotTakeAPlaceInTheBatch) {
  Init(/*blocks=*/32, /*budget=*/64, /*max_seqs=*/1, /*max_awaiting_kv=*/4);
  Sequence* a = Add("A", 5);
  EXPECT_THAT(Step(), ElementsAre("A:0+5*"));
  Sequence* b = Add("B", 5, 0, 100);
  ASSERT_TRUE(scheduler_->AdmitForTransfer(b));  // The batch is full (A); B awaits its KV.
  EXPECT_EQ(scheduler_->num_awaiting_kv(), 1);
  Sequence* c = Add("C", 5, 0, 200);
  EXPECT_THAT(Step(), ElementsAre("A:5+1*"));  // C waits for a place.
  scheduler_->TransferDone(b, 5);
  b->tokens.push_back(7);  // Its first token, from the prefill worker.
  EXPECT_EQ(scheduler_->num_running(), 2);
  EXPECT_THAT(Step(), ElementsAre("A:6+1*"));  // One place: the earlier arrival's.
  EXPECT_EQ(c->state, SequenceState::kWaiting);
  scheduler_->Finish(a);
  EXPECT_THAT(Step(), ElementsAre("B:5+1*"));
  EXPECT_EQ(c->state, SequenceState::kWaiting);
  scheduler_->Finish(b);
  EXPECT_THAT(Step(), ElementsAre("C:0+5*"));
  scheduler_->Finish(c);
  ExpectAllFreeOrCached();
}

TEST(SchedulerConfigTest, BadLimitsNameTheFlagAndItsRange) {
  SchedulerConfig config;
  config.max_awaiting_kv = 0;
  EXPECT_EQ(config.Validate().message(), "max_awaiting_kv: 0 is outside [1, 1048576]");
  config.max_awaiting_kv = 1;
  config.max_num_seqs = 0;
  EXPECT_EQ(config.Validate().message(), "max_num_seqs: 0 is outside [1, 65536]");
}

// What the worker reports of its steps and load, and the blocks a transfer writes: the
// functions the engine loop and pdserve-sim share (step_report.h).
TEST_F(SchedulerTest, StepObservationsLoadAndTransferBlocksFollowTheSchedulersState) {
  Init(/*blocks=*/16, /*budget=*/8);
  Add("A", 6);
  Step();  // A's prompt in one chunk: 6 tokens attending to 1..6 positions.
  Add("B", 10, 0, /*first_token=*/500);  // Shares no prefix with A.
  StepPlan plan;
  Step(&plan);  // A decodes at position 6; B's first 7 prompt tokens.
  const StepObservation step = ObserveStep(plan);
  EXPECT_EQ(step.num_decode, 1);
  EXPECT_EQ(step.num_prefill_tokens, 7);
  EXPECT_EQ(step.prefill_context_tokens, 1 + 2 + 3 + 4 + 5 + 6 + 7);
  EXPECT_EQ(step.context_tokens, step.prefill_context_tokens + 7);
  EXPECT_EQ(step.duration_ms, 0);

  const kvcache::BlockCounts counts = blocks_->counts();
  const LoadSnapshot load = DecodeLoad(*scheduler_, counts);
  EXPECT_EQ(load.running, 2);
  EXPECT_EQ(load.waiting, 0);
  EXPECT_EQ(load.pending_prefill_tokens, 3);
  // Its attention work: B's last 3 tokens after 7 computed, (7 + 3)^2 - 7^2.
  EXPECT_DOUBLE_EQ(load.pending_prefill_token_squares, 10.0 * 10 - 7.0 * 7);
  // Every token each sequence holds: what its decode steps will attend to.
  int64_t held = 0;
  for (const Sequence* s : scheduler_->running()) held += s->num_tokens();
  EXPECT_GE(held, 6 + 10);
  EXPECT_EQ(load.context_tokens, held);
  EXPECT_EQ(load.free_blocks, counts.free + counts.cached);  // Evictable blocks are free.
  EXPECT_EQ(load.total_blocks, 16);

  // B's prompt covers blocks 0..2 (10 positions, 4 a block); with 4 cached tokens the
  // transfer writes blocks 1 and 2.
  Sequence* b = scheduler_->running()[1];
  ASSERT_EQ(b->request_id, "B");
  const std::vector<int32_t> shipped = TransferBlocks(*b, 4, kBlock);
  EXPECT_EQ(shipped, std::vector<int32_t>({b->block_table[1], b->block_table[2]}));

  // A waiting sequence's tokens count too: its steps will attend to them once it runs.
  Add("C", 5, 0, /*first_token=*/900);
  EXPECT_EQ(DecodeLoad(*scheduler_, blocks_->counts()).context_tokens, held + 5);
  EXPECT_EQ(TransferBlocks(*b, 0, kBlock).size(), 3u);
}

}  // namespace
}  // namespace pdserve::decode
