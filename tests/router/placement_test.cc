// Placement as tables: every policy's decision and reason for the situations the cost model
// distinguishes, with the cost model's predictions checked against hand computation.
#include <memory>

#include "gtest/gtest.h"
#include "router/placement/placement_policy.h"

namespace pdserve::router {
namespace {

// A cost model with round numbers: steps cost 10 + 1*D + 0.1*P ms (no attention term),
// prefill costs 0.08 ms per token, transfers 0.5 ms + bytes / 1e6 per ms.
CostModelParams Params() {
  CostModelParams p;
  p.step_intercept_ms = 10;
  p.step_per_decode_ms = 1;
  p.step_per_prefill_token_ms = 0.1;
  p.step_per_attention_ms = 0;
  p.step_per_prefill_attention_ms = 0;
  p.prefill_overhead_ms = 0;
  p.prefill_per_token_ms = 0.08;
  p.prefill_per_token_squared_ms = 0;
  p.transfer_latency_ms = 0.5;
  p.transfer_bytes_per_ms = 1e6;
  p.offload_overhead_ms = 2;
  return p;
}

PlacementInputs Inputs(int prompt, int cached, int running,
                       std::vector<int64_t> prefill_queues = {0}) {
  PlacementInputs in;
  in.prompt_tokens = prompt;
  in.cached_tokens = cached;
  in.decode.running = running;
  in.decode.step_token_budget = 512;
  in.decode.fingerprint = 1;
  in.decode.kv_bytes_per_token = 4000;  // 4 layers x 1000 bytes.
  in.decode.num_layers = 4;
  for (size_t i = 0; i < prefill_queues.size(); ++i) {
    in.prefill.push_back(
        PrefillCandidate{static_cast<int>(i), prefill_queues[i], /*tokens_per_second=*/10000});
  }
  return in;
}

// The same, with requests arriving at the decode worker at `per_s`.
PlacementInputs Arriving(PlacementInputs in, double per_s) {
  in.decode.arrivals_per_s = per_s;
  return in;
}

TEST(EstimateCostsTest, MatchesHandComputation) {
  CostModel model(Params());
  // 2000 uncached tokens next to 12 decodes: chunks of 500, 4 chunks.
  const CostEstimate e = EstimateCosts(Inputs(2000, 0, 12), model);
  const double prefill_part = 0.1 * 2000;  // Linear model: the prefill's share of its steps.
  const double step_decode = 10 + 12;
  EXPECT_NEAR(e.interference_ms, 12 * prefill_part, 1e-6);
  EXPECT_NEAR(e.ttft_local_ms, 4 * step_decode + prefill_part, 1e-6);
  EXPECT_NEAR(e.mixed_step_ms, step_decode + prefill_part / 4, 1e-6);
  // Nothing arriving: the streams' mean TPOT is the decode step's.
  EXPECT_NEAR(e.tpot_local_ms, step_decode, 1e-6);
  // Prefills like this one arriving twice a second take 40 % of the worker's time.
  EXPECT_NEAR(EstimateCosts(Arriving(Inputs(2000, 0, 12), 2), model).tpot_local_ms,
              step_decode / (1 - 2 * prefill_part / 1e3), 1e-6);
  // Saturated: capped rather than infinite or negative.
  EXPECT_NEAR(EstimateCosts(Arriving(Inputs(2000, 0, 12), 50), model).tpot_local_ms,
              step_decode / 0.05, 1e-6);
  const double tail = 0.5 + 2000 * 4000.0 / 4 / 1e6;
  EXPECT_NEAR(e.transfer_tail_ms, tail, 1e-6);
  EXPECT_NEAR(e.ttft_offload_ms, 2 + 0.08 * 2000 + tail, 1e-6);
  EXPECT_NEAR(e.offload_cost_ms, tail + std::max(0.0, e.ttft_offload_ms - e.ttft_local_ms), 1e-6);
}

struct Row {
  std::string what;
  std::string policy;
  PlacementInputs inputs;
  bool offload;
  std::string reason;
  std::vector<int> prefill;  // Expected order when offloading.
};

TEST(PlacementPolicyTest, DecisionsAndReasons) {
  CostModel model(Params());
  const std::vector<Row> rows = {
      {"no prefill worker", "cost_model", Inputs(4000, 0, 8, {}), false, "no_prefill_worker", {}},
      {"short prompt", "cost_model", Inputs(100, 0, 8), false, "short_prompt", {}},
      {"warm prefix", "cost_model", Inputs(3000, 2912, 8), false, "warm_prefix", {}},
      {"nothing to interfere with",
       "cost_model",
       Inputs(4000, 0, 0),
       false,
       "interference_below_transfer",
       {}},
      {"interference exceeds transfer",
       "cost_model",
       Inputs(4000, 0, 8, {0, 0}),
       true,
       "interference_exceeds_transfer",
       {0, 1}},
      {"the idle prefill worker first",
       "cost_model",
       Inputs(4000, 0, 8, {5000, 0}),
       true,
       "interference_exceeds_transfer",
       {1, 0}},
      // 2 s of queue, past --max_prefill_queue (1 s), but nothing queues behind it and the
      // objective allows it: the offload costs its tail only (the queue is a term of the
      // cost, no longer a rule that keeps the prompt beside the 8 streams).
      {"a long prefill queue nobody waits behind",
       "cost_model",
       Inputs(4000, 0, 8, {20000}),
       true,
       "interference_exceeds_transfer",
       {0}},
      {"the shortest queue first, the long one its alternate",
       "cost_model",
       Inputs(4000, 0, 8, {20000, 0}),
       true,
       "interference_exceeds_transfer",
       {1, 0}},
      {"always local", "always_local", Inputs(4000, 0, 8), false, "policy_always_local", {}},
      {"always offload", "always_offload", Inputs(100, 0, 0), true, "policy_always_offload", {0}},
      {"always offload without workers",
       "always_offload",
       Inputs(100, 0, 0, {}),
       false,
       "no_prefill_worker",
       {}},
      {"length threshold: long",
       "length_threshold",
       Inputs(1024, 0, 0),
       true,
       "length_threshold",
       {0}},
      {"length threshold: short",
       "length_threshold",
       Inputs(1023, 0, 8),
       false,
       "length_threshold",
       {}},
      {"length threshold: warm",
       "length_threshold",
       Inputs(3000, 2000, 8),
       false,
       "length_threshold",
       {}},
  };
  for (const Row& row : rows) {
    PolicyConfig config;
    config.name = row.policy;
    config.alternates = 1;
    config.slo.ttft_ms = 100000;  // The SLO cases are below.
    auto policy = MakePlacementPolicy(config);
    ASSERT_TRUE(policy.ok()) << policy.status();
    const PlacementDecision d = (*policy)->Decide(row.inputs, model);
    EXPECT_EQ(d.offload, row.offload) << row.what;
    EXPECT_EQ(d.reason, row.reason) << row.what;
    if (row.offload) {
      EXPECT_EQ(d.prefill, row.prefill) << row.what;
    }
    EXPECT_EQ((*policy)->name(), row.policy);
  }
}

// The cost_model policy, its other settings default, with these default objectives.
std::unique_ptr<PlacementPolicy> CostModelWithSlo(double ttft_ms, double tpot_ms) {
  PolicyConfig config;
  config.slo = SloConfig{.ttft_ms = ttft_ms, .tpot_ms = tpot_ms};
  auto policy = MakePlacementPolicy(config);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return policy.ok() ? *std::move(policy) : nullptr;
}

TEST(PlacementPolicyTest, SlosBoundTheCostModel) {
  CostModel model(Params());
  PolicyConfig config;
  // TTFT: an offload that would miss it while local would not stays local, even with heavy
  // interference.
  config.slo.ttft_ms = 300;
  config.slo.tpot_ms = 100000;
  auto policy = MakePlacementPolicy(config);
  ASSERT_TRUE(policy.ok());
  PlacementDecision d = (*policy)->Decide(Inputs(2000, 0, 8, {900 * 10}), model);  // 900 ms queue.
  EXPECT_FALSE(d.offload);
  EXPECT_EQ(d.reason, "slo_infeasible_offload");
  // TPOT: local prefills that stretch the decode steps past the objective on average move
  // the prefill away even when the interference alone would not (11 ms decode steps, 30 ms
  // of prefill 20 times a second: 27.5 ms mean TPOT).
  config.slo.ttft_ms = 100000;
  config.slo.tpot_ms = 20;
  config.min_offload_tokens = 256;
  policy = MakePlacementPolicy(config);
  ASSERT_TRUE(policy.ok());
  d = (*policy)->Decide(Arriving(Inputs(300, 0, 1), 20), model);
  EXPECT_TRUE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "local_exceeds_tpot_slo");
  // Both objectives at stake: the running streams' TPOT wins over this request's TTFT.
  config.slo.ttft_ms = 300;
  policy = MakePlacementPolicy(config);
  ASSERT_TRUE(policy.ok());
  d = (*policy)->Decide(Arriving(Inputs(2000, 0, 8, {900 * 10}), 5), model);
  EXPECT_TRUE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "local_exceeds_tpot_slo_late");
  // Late wherever it goes: to the latest prefill worker, whose queued offloads are late
  // already, not to the shortest queue (200 ms of queue, 160 of compute and 4.5 of overhead
  // and transfer against the 300 ms objective: late too, but its followers less so).
  d = (*policy)->Decide(Arriving(Inputs(2000, 0, 8, {200 * 10, 900 * 10, 400 * 10}), 5), model);
  EXPECT_TRUE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "local_exceeds_tpot_slo_late");
  EXPECT_EQ(d.prefill, (std::vector<int>{1, 2}));
  EXPECT_NEAR(d.estimate.ttft_offload_ms, d.estimate.prefill[0].ttft_ms, 1e-9);
  EXPECT_GT(d.estimate.ttft_offload_ms, 900);
  // One that meets them takes it.
  d = (*policy)->Decide(Arriving(Inputs(2000, 0, 8, {900 * 10, 0, 400 * 10}), 5), model);
  EXPECT_EQ(d.reason, "local_exceeds_tpot_slo");
  EXPECT_EQ(d.prefill, (std::vector<int>{1, 2}));
  // A prefill queue past --max_prefill_queue does not bring the prefill back next to running
  // streams whose TPOT it would break; the shortest queue takes it.
  config.slo.ttft_ms = 100000;
  config.max_prefill_queue_ms = 500;
  policy = MakePlacementPolicy(config);
  ASSERT_TRUE(policy.ok());
  d = (*policy)->Decide(Arriving(Inputs(4000, 0, 8, {20000, 30000}), 1), model);
  EXPECT_TRUE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "local_exceeds_tpot_slo");
  EXPECT_EQ(d.prefill, (std::vector<int>{0, 1}));
  // With nothing running and nothing expected to arrive, local chunks slow no stream, while
  // the offload costs at least its transfer tail: local.
  PlacementInputs idle = Inputs(4000, 0, 0, {20000});
  d = (*policy)->Decide(idle, model);
  EXPECT_FALSE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "interference_below_transfer");
  // Streams expected to start during the local prefill count as streams beside it.
  idle.decode.arrivals_per_s = 5;  // ~2.4 arrivals during its 480 ms.
  d = (*policy)->Decide(idle, model);
  EXPECT_NEAR(d.estimate.expected_arrivals, 5 * 0.48, 1e-6);
  EXPECT_TRUE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "local_exceeds_tpot_slo");
}

// What staying costs the request itself counts: behind a long local backlog a prompt that the
// interference alone would keep local (nothing runs beside it) misses its TTFT there while an
// offload meets it, so it moves.
TEST(PlacementPolicyTest, ALocalBacklogPastTheObjectiveMovesThePrompt) {
  CostModel model(Params());
  auto policy = CostModelWithSlo(/*ttft_ms=*/1000, /*tpot_ms=*/100000);
  ASSERT_NE(policy, nullptr);
  PlacementInputs in = Inputs(1000, 0, 0);
  PlacementDecision d = policy->Decide(in, model);
  EXPECT_FALSE(d.offload) << d.reason;  // 120 ms local, no stream beside it.
  EXPECT_EQ(d.reason, "interference_below_transfer");
  // 20,000 tokens ahead of it: 40 chunks of 512 (10 ms each) and 2 s of prefill, then its own
  // 2 chunks and 100 ms: 2,520 ms, against 83.5 offloaded.
  in.decode.pending_prefill_tokens = 20000;
  d = policy->Decide(in, model);
  EXPECT_NEAR(d.estimate.ttft_local_ms, 40 * 10 + 0.1 * 20000 + 2 * 10 + 0.1 * 1000, 1e-6);
  EXPECT_TRUE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "local_exceeds_ttft_slo");
  // Within the objective the backlog costs it nothing: local, as before.
  policy = CostModelWithSlo(/*ttft_ms=*/3000, /*tpot_ms=*/100000);
  ASSERT_NE(policy, nullptr);
  EXPECT_FALSE(policy->Decide(in, model).offload);
}

// A backlog is priced by its prompts' lengths when the worker reports them (the sum of their
// squares: attention), not as tokens at a recent rate: one 9,000-token prompt takes longer
// than nine of 1,000.
TEST(EstimateCostsTest, BacklogsArePricedByTheirPromptsLengths) {
  CostModelParams params = Params();
  params.prefill_per_token_squared_ms = 1e-5;
  params.step_per_prefill_attention_ms = 1e-5;
  CostModel model(params);
  auto estimate = [&](double prefill_squares, double decode_squares) {
    PlacementInputs in = Inputs(100, 0, 0, {9000});
    in.prefill[0].pending_token_squares = prefill_squares;
    in.decode.pending_prefill_tokens = 9000;
    in.decode.pending_prefill_token_squares = decode_squares;
    return EstimateCosts(in, model);
  };
  const CostEstimate one = estimate(9000.0 * 9000, 9000.0 * 9000);
  const CostEstimate nine = estimate(9 * 1000.0 * 1000, 9 * 1000.0 * 1000);
  const CostEstimate unknown = estimate(0, 0);
  EXPECT_NEAR(one.prefill[0].queue_ms, 0.08 * 9000 + 1e-5 * 9000.0 * 9000, 1e-6);
  EXPECT_NEAR(nine.prefill[0].queue_ms, 0.08 * 9000 + 1e-5 * 9 * 1000.0 * 1000, 1e-6);
  EXPECT_NEAR(unknown.prefill[0].queue_ms, 9000 / 10000.0 * 1e3, 1e-6);  // Its recent rate.
  // Locally: 18 chunks of 10 ms, the backlog's tokens, and its attention (P(P+1)/2 of one
  // prompt; the sum of each one's for nine); not reported, as one prompt.
  const double own = 10 + 0.1 * 100 + 1e-5 * 100 * 101 / 2;
  EXPECT_NEAR(one.ttft_local_ms, 18 * 10 + 900 + 1e-5 * (9000.0 * 9000 + 9000) / 2 + own, 1e-6);
  EXPECT_NEAR(nine.ttft_local_ms, 18 * 10 + 900 + 1e-5 * (9e6 + 9000) / 2 + own, 1e-6);
  EXPECT_NEAR(unknown.ttft_local_ms, one.ttft_local_ms, 1e-6);
}

// Objectives per request: the request's own TTFT bounds its offload, and the TPOT a local
// prefill must respect is the tightest among the streams beside it (the default for those the
// router does not know, and for streams expected to arrive).
TEST(PlacementPolicyTest, PerRequestObjectivesDecide) {
  CostModel model(Params());
  auto policy = CostModelWithSlo(300, 100000);
  ASSERT_NE(policy, nullptr);
  // The default TTFT keeps this offload local (as in SlosBoundTheCostModel); a request that
  // allows 5 s is offloaded, the interference being heavy.
  PlacementInputs in = Inputs(2000, 0, 8, {900 * 10});
  EXPECT_EQ(policy->Decide(in, model).reason, "slo_infeasible_offload");
  in.slo = SloConfig{.ttft_ms = 5000, .tpot_ms = 100000};
  const PlacementDecision d = policy->Decide(in, model);
  EXPECT_TRUE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "interference_exceeds_transfer");

  // TPOT beside: 300-token prompts arriving 20 times a second next to one stream make its
  // mean TPOT 27.5 ms.
  policy = CostModelWithSlo(100000, 20);
  ASSERT_NE(policy, nullptr);
  PlacementInputs beside = Arriving(Inputs(300, 0, 1), 20);
  EXPECT_EQ(policy->Decide(beside, model).reason, "local_exceeds_tpot_slo");
  // The one running stream is known to allow 1 s per token: the default does not apply, and
  // the decision is the cost comparison's (no arrival expected during its 41 ms).
  beside.decode.streams_with_objective = 1;
  beside.decode.tightest_tpot_ms = 1000;
  EXPECT_EQ(policy->Decide(beside, model).reason, "interference_exceeds_transfer");
  // Known to need 25 ms: broken again.
  beside.decode.tightest_tpot_ms = 25;
  EXPECT_EQ(policy->Decide(beside, model).reason, "local_exceeds_tpot_slo");
  // A second running stream the router does not know is held to the default.
  beside.decode.tightest_tpot_ms = 1000;
  beside.decode.running = 2;
  EXPECT_EQ(policy->Decide(beside, model).reason, "local_exceeds_tpot_slo");
  // The request's own TPOT is not at stake in its own prefill's placement.
  beside.decode.running = 1;
  beside.slo = SloConfig{.ttft_ms = 100000, .tpot_ms = 1};
  EXPECT_EQ(policy->Decide(beside, model).reason, "interference_exceeds_transfer");
}

TEST(PlacementPolicyTest, ShortPromptsMoveOnlyWhenTheyBreakTheMeanTpot) {
  CostModel model(Params());
  PolicyConfig config;
  config.tpot_headroom = 1;  // The objective itself (HeadroomAndLengthMixJudgeTheMeanTpot).
  config.min_offload_tokens = 256;
  config.min_tpot_offload_tokens = 32;
  config.slo.ttft_ms = 100000;
  // 8 decodes step in 18 ms; 100-token prompts (10 ms each) arriving 40 times a second take
  // 40 % of the worker and make the mean TPOT 30 ms.
  config.slo.tpot_ms = 25;
  auto policy = MakePlacementPolicy(config);
  ASSERT_TRUE(policy.ok());
  PlacementDecision d = (*policy)->Decide(Arriving(Inputs(100, 0, 8), 40), model);
  EXPECT_NEAR(d.estimate.tpot_local_ms, 30, 1e-6);
  EXPECT_TRUE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "local_exceeds_tpot_slo");
  // A prefill worker busy for longer than the delay the local step causes (8 x 10 ms plus
  // the arrivals'): the short prompt stays.
  d = (*policy)->Decide(Arriving(Inputs(100, 0, 8, {3000}), 40), model);  // 300 ms queue.
  EXPECT_FALSE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "short_prompt");
  // 50-token prompts (22.5 ms mean TPOT) fit the objective: local, as any short prompt.
  d = (*policy)->Decide(Arriving(Inputs(50, 0, 8), 40), model);
  EXPECT_FALSE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "short_prompt");
  // Unless the worker's steps, as measured, already take longer than the objective: the
  // prediction is wrong there, and the prompt moves as one that breaks it.
  PlacementInputs measured = Arriving(Inputs(50, 0, 8), 40);
  measured.decode.measured_step_ms = 26;
  d = (*policy)->Decide(measured, model);
  EXPECT_TRUE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "local_exceeds_tpot_slo");
  measured.decode.measured_step_ms = 24;  // Within it: the prediction decides.
  EXPECT_FALSE((*policy)->Decide(measured, model).offload);
  // So do 100-token prompts arriving rarely: their one 28 ms step is slower than the
  // objective, but a stream's TPOT is its mean, which they barely move.
  d = (*policy)->Decide(Arriving(Inputs(100, 0, 8), 1), model);
  EXPECT_NEAR(d.estimate.mixed_step_ms, 28, 1e-6);
  EXPECT_FALSE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "short_prompt");
  // Below the floor an offload never pays, whatever the objective.
  config.slo.tpot_ms = 1;
  policy = MakePlacementPolicy(config);
  ASSERT_TRUE(policy.ok());
  d = (*policy)->Decide(Arriving(Inputs(31, 0, 8), 40), model);
  EXPECT_FALSE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "short_prompt");
  // Nothing running beside it: nobody's TPOT is at stake.
  d = (*policy)->Decide(Inputs(100, 0, 0), model);
  EXPECT_FALSE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "short_prompt");
}

TEST(StreamLengthsTest, BucketsArePowersOfTwoWithTheLongestInTheLast) {
  EXPECT_EQ(StreamLengthBucket(0), 0);
  EXPECT_EQ(StreamLengthBucket(1), 0);
  EXPECT_EQ(StreamLengthBucket(2), 1);
  EXPECT_EQ(StreamLengthBucket(3), 1);
  EXPECT_EQ(StreamLengthBucket(4), 2);
  EXPECT_EQ(StreamLengthBucket(1023), 9);
  EXPECT_EQ(StreamLengthBucket(1024), 10);
  EXPECT_EQ(StreamLengthBucket(1 << 20), kStreamLengthBuckets - 1);
}

// A stream shorter than a local prefill sees every one of its steps mixed with the prefill's
// chunks: its TPOT is the mixed step, not the long-run mean. Short streams beside a prompt
// weigh on the streams' TPOT in proportion, each against its own objective; long ones barely.
TEST(PlacementPolicyTest, ShortStreamsBesideALocalPrefillSeeItsMixedSteps) {
  CostModel model(Params());
  // --tpot_headroom at its default, 1: the objective itself.
  auto policy = CostModelWithSlo(/*ttft_ms=*/100000, /*tpot_ms=*/30);
  ASSERT_NE(policy, nullptr);
  // 2000 tokens beside 12 decodes: 4 chunks, 22 ms decode steps, 72 ms mixed ones (50 ms of
  // them the prefill's); nothing arriving, so the long-run mean TPOT is 22 ms of 30.
  PlacementInputs in = Inputs(2000, 0, 12);
  PlacementDecision d = policy->Decide(in, model);
  EXPECT_NEAR(d.estimate.tpot_local_ms, 22, 1e-6);
  EXPECT_EQ(d.estimate.short_streams_delay_ms, 0);
  EXPECT_NE(d.reason, "local_exceeds_tpot_slo");
  // Half the streams may generate 4-7 tokens (3 or more decode steps, all within the 4 mixed
  // steps), without objectives of their own: each sees 50 ms more per token; averaged over
  // the 12, 25 ms more, against the default 30 ms: 22/30 + 25/30 > 1.
  in.decode.short_streams.Add(StreamLengthBucket(4), 0);
  for (int i = 1; i < 6; ++i) in.decode.short_streams.Add(StreamLengthBucket(5), 0);
  d = policy->Decide(in, model);
  EXPECT_NEAR(d.estimate.tpot_local_ms, 22, 1e-6);
  EXPECT_NEAR(d.estimate.short_streams_delay_ms, 50.0 * 6 / 12, 1e-6);
  EXPECT_TRUE(d.offload);
  EXPECT_EQ(d.reason, "local_exceeds_tpot_slo");
  // The same streams as batch requests (TPOT objective 200 ms, the tightest beside it 30 ms):
  // 25 ms is an eighth of theirs, and 22/30 + 1/8 < 1.
  in.decode.short_streams = {};
  for (int i = 0; i < 6; ++i) in.decode.short_streams.Add(StreamLengthBucket(4), 200);
  d = policy->Decide(in, model);
  EXPECT_NEAR(d.estimate.short_streams_delay_share, 25.0 / 200, 1e-6);
  EXPECT_NE(d.reason, "local_exceeds_tpot_slo");
  // Interactive ones (25 ms) break: 22/30 + 1 > 1.
  in.decode.short_streams = {};
  for (int i = 0; i < 6; ++i) in.decode.short_streams.Add(StreamLengthBucket(4), 25);
  EXPECT_EQ(policy->Decide(in, model).reason, "local_exceeds_tpot_slo");
  // Streams of 64-127 tokens see at most 4 of their 63 or more steps mixed.
  in.decode.short_streams = {};
  for (int i = 0; i < 12; ++i) in.decode.short_streams.Add(StreamLengthBucket(100), 0);
  d = policy->Decide(in, model);
  EXPECT_NEAR(d.estimate.short_streams_delay_ms, 50.0 * 4 / 63, 1e-6);
  EXPECT_NE(d.reason, "local_exceeds_tpot_slo");
  // Single-token streams have no TPOT; the last bucket is the longest streams'.
  in.decode.short_streams = {};
  for (int i = 0; i < 12; ++i) {
    in.decode.short_streams.Add(0, 0);
    in.decode.short_streams.Add(kStreamLengthBuckets - 1, 0);
  }
  EXPECT_EQ(policy->Decide(in, model).estimate.short_streams_delay_ms, 0);
}

// A short stream beside a local prefill runs through the local backlog's chunks before the
// prefill's own: with a backlog, a prompt that alone would barely touch the short streams
// lengthens a stretch of steps they spend wholly above their objective.
TEST(PlacementPolicyTest, ShortStreamsRunThroughTheLocalBacklogToo) {
  CostModel model(Params());
  auto policy = CostModelWithSlo(/*ttft_ms=*/100000, /*tpot_ms=*/30);
  ASSERT_NE(policy, nullptr);
  // A 100-token prompt beside 12 streams of 4-7 tokens: one 10 ms mixed step of their 3 or
  // more, 3.3 ms more per token each; 22/30 + 3.3/30 < 1: local.
  PlacementInputs in = Inputs(100, 0, 12);
  for (int i = 0; i < 12; ++i) in.decode.short_streams.Add(StreamLengthBucket(4), 0);
  PlacementDecision d = policy->Decide(in, model);
  EXPECT_NEAR(d.estimate.short_streams_delay_ms, 10.0 / 3, 1e-6);
  EXPECT_FALSE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "short_prompt");
  // Behind 1,400 tokens of local prefills: 3 chunks then its own, 150 ms of prefill over 4
  // steps, every one of the short streams' steps: 37.5 ms more per token. It moves.
  in.decode.pending_prefill_tokens = 1400;
  d = policy->Decide(in, model);
  EXPECT_NEAR(d.estimate.short_streams_delay_ms, 150.0 / 4, 1e-6);
  EXPECT_NEAR(d.estimate.ttft_local_ms, 3 * 22 + 140 + 22 + 10, 1e-6);
  EXPECT_TRUE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "local_exceeds_tpot_slo");
  // Long streams beside the same backlog: 4 mixed steps among hundreds; it stays.
  in.decode.short_streams = {};
  for (int i = 0; i < 12; ++i) in.decode.short_streams.Add(StreamLengthBucket(1000), 0);
  d = policy->Decide(in, model);
  EXPECT_FALSE(d.offload) << d.reason;
}

// Which long prompts break the mean TPOT: the worker keeps prompts up to some length local,
// so a prompt's TPOT harm is that of its length class and the shorter ones at their measured
// rates, held under --tpot_headroom of the objective.
TEST(PlacementPolicyTest, HeadroomAndLengthMixJudgeTheMeanTpot) {
  CostModel model(Params());
  PolicyConfig config;
  config.slo.ttft_ms = 100000;
  config.slo.tpot_ms = 40;
  config.tpot_headroom = 0.7;  // 28 ms.
  auto policy = MakePlacementPolicy(config);
  ASSERT_TRUE(policy.ok());
  // 8 decodes step in 18 ms. Arrivals: 100-token prompts (10 ms of prefill each) 30 times a
  // second, 2000-token ones (200 ms) twice in 4 s: 30 % and 10 % of the worker's time.
  auto mixed = [](int prompt) {
    PlacementInputs in = Arriving(Inputs(prompt, 0, 8), 30.5);
    in.decode.arrival_classes = {{.min_tokens = 90.5, .mean_tokens = 100, .per_s = 30},
                                 {.min_tokens = 1722, .mean_tokens = 2000, .per_s = 0.5}};
    return in;
  };
  // A 2000-token prompt: both classes local, 18 / 0.6 = 30 ms > 28: offloaded.
  PlacementDecision d = (*policy)->Decide(mixed(2000), model);
  EXPECT_NEAR(d.estimate.tpot_local_ms, 30, 1e-6);
  EXPECT_TRUE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "local_exceeds_tpot_slo");
  // A 1000-token prompt joins the short ones only: 18 / 0.7 = 25.7 ms. Taken as "prompts like
  // it at the worker's whole rate" (no mix) it would read 30.5 * 100 ms: saturated.
  d = (*policy)->Decide(mixed(1000), model);
  EXPECT_NEAR(d.estimate.tpot_local_ms, 18 / 0.7, 1e-6);
  EXPECT_NE(d.reason, "local_exceeds_tpot_slo");
  PlacementInputs unmixed = mixed(1000);
  unmixed.decode.arrival_classes.clear();
  d = (*policy)->Decide(unmixed, model);
  EXPECT_NEAR(d.estimate.tpot_local_ms, 18 / 0.05, 1e-6);
  EXPECT_EQ(d.reason, "local_exceeds_tpot_slo");
  // With no headroom the 2000-token prompt's 30 ms fits the 40 ms objective.
  config.tpot_headroom = 1;
  policy = MakePlacementPolicy(config);
  ASSERT_TRUE(policy.ok());
  EXPECT_NE((*policy)->Decide(mixed(2000), model).reason, "local_exceeds_tpot_slo");
}

TEST(PlacementPolicyTest, ArrivalsDuringALocalPrefillCountAsInterference) {
  CostModel model(Params());
  auto policy = MakePlacementPolicy(PolicyConfig());
  ASSERT_TRUE(policy.ok());
  // An idle worker: nothing runs, so only expected arrivals can make local costly.
  PlacementInputs idle = Inputs(4000, 0, 0);
  PlacementDecision d = (*policy)->Decide(idle, model);
  EXPECT_FALSE(d.offload);
  EXPECT_EQ(d.reason, "interference_below_transfer");
  idle.decode.arrivals_per_s = 2;  // ~1.1 arrivals during its ~560 ms local prefill.
  d = (*policy)->Decide(idle, model);
  const double duration = 8 * 10 + 0.1 * 4000;
  EXPECT_NEAR(d.estimate.interference_ms, 2 * duration / 1e3 * duration / 2, 1e-6);
  EXPECT_TRUE(d.offload);
  EXPECT_EQ(d.reason, "interference_exceeds_transfer");
}

// The offload's counterpart: its compute delays the offloads that queue behind it at the
// prefill worker (FIFO), so a busy prefill worker makes offloading costly as a busy decode
// worker makes local prefill costly.
TEST(PlacementPolicyTest, OffloadsQueueingBehindAnOffloadCountAgainstIt) {
  CostModel model(Params());
  auto policy = MakePlacementPolicy(PolicyConfig());
  ASSERT_TRUE(policy.ok());
  // 2000 tokens beside 4 decodes: interference 4 x 200 ms = 800 ms; an idle prefill worker
  // nobody else sends to costs the transfer tail only.
  PlacementInputs in = Inputs(2000, 0, 4, {5000});  // 500 ms of queue.
  PlacementDecision d = (*policy)->Decide(in, model);
  EXPECT_TRUE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "interference_exceeds_transfer");
  ASSERT_FALSE(d.estimate.prefill.empty());
  EXPECT_EQ(d.estimate.prefill[0].queueing_interference_ms, 0);
  // Offloads of 200 tokens (16 ms each) arriving there twice a second: those arriving during
  // its 500 ms wait are delayed by its whole 160 ms compute, those during its compute by half
  // of it; and as offloads keep arriving while the queue drains, the worker idles only after
  // 1 / (1 - rho) of that, rho = 2 x 16 ms a second (the test below).
  auto short_offloads = [](double per_s) {
    return std::vector<LengthClassRate>{{.min_tokens = 181, .mean_tokens = 200, .per_s = per_s}};
  };
  in.prefill[0].arrivals_per_s = 2;
  in.prefill[0].arrival_classes = short_offloads(2);
  const double compute = 0.08 * 2000, queue = 500;
  const double queueing = 2 / 1e3 * (queue * compute + compute * compute / 2) / (1 - 2 * 0.016);
  d = (*policy)->Decide(in, model);
  ASSERT_FALSE(d.estimate.prefill.empty());
  EXPECT_NEAR(d.estimate.prefill[0].queueing_interference_ms, queueing, 1e-6);
  // Its TTFT (2 + 500 + 160 + the tail, ~663 ms) plus one more compute is within the 2 s
  // objective: the offloads behind it still make theirs, and the delay costs nothing.
  EXPECT_NEAR(d.estimate.offload_cost_ms, d.estimate.transfer_tail_ms, 1e-6);
  EXPECT_TRUE(d.offload) << d.reason;
  // Ten a second: 928 ms of delay to later offloads over rho = 0.16, 1,105 ms, still harmless
  // under a 2 s objective...
  in.prefill[0].arrivals_per_s = 10;
  in.prefill[0].arrival_classes = short_offloads(10);
  const double stretch = 1 / (1 - 10 * 0.016);
  d = (*policy)->Decide(in, model);
  EXPECT_TRUE(d.offload) << d.reason;
  // ...but under a 750 ms default the offloads behind it end past it: ~823 - 750 = 73 of
  // their 160 ms of delay count, 1,105 x 73 / 160 = 504 ms: still below 800 ms of interference.
  auto with_default_ttft = [](double ttft_ms) {
    PolicyConfig c;
    c.slo.ttft_ms = ttft_ms;
    return *MakePlacementPolicy(c);
  };
  d = with_default_ttft(750)->Decide(in, model);
  ASSERT_TRUE(d.offload) << d.reason;
  const double ttft = d.estimate.prefill[0].ttft_ms;
  EXPECT_NEAR(d.estimate.offload_cost_ms,
              d.estimate.transfer_tail_ms + 10 / 1e3 * (queue * compute + compute * compute / 2) *
                                                stretch * (ttft + compute - 750) / compute,
              1e-6);
  // Under 680 ms, 89 % of it, 983 ms against 800 (the offload alone still meets its own
  // objective, so only the comparison of harms decides): local.
  d = with_default_ttft(680)->Decide(in, model);
  EXPECT_FALSE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "interference_below_transfer");
  // The followers are judged by the default objective, not this request's: a batch request's
  // 10 s TTFT does not make the delay to the requests behind it harmless.
  in.slo = SloConfig{.ttft_ms = 10000, .tpot_ms = 200};
  d = with_default_ttft(680)->Decide(in, model);
  EXPECT_FALSE(d.offload) << d.reason;
  in.slo.reset();
  // Past --max_prefill_queue the whole delay counts, objective or not: the queue beyond it is
  // the margin that prompts which cannot stay local need (1,105 ms against 800: local).
  PolicyConfig short_headroom;
  short_headroom.max_prefill_queue_ms = 400;
  auto strict = MakePlacementPolicy(short_headroom);
  ASSERT_TRUE(strict.ok());
  d = (*strict)->Decide(in, model);
  EXPECT_FALSE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "interference_below_transfer");
  EXPECT_NEAR(d.estimate.offload_cost_ms, d.estimate.transfer_tail_ms + 928 * stretch, 1);
  // The estimate every policy reports carries the whole delay (no objective in it).
  const CostEstimate e = EstimateCosts(in, model);
  EXPECT_NEAR(e.offload_cost_ms,
              e.transfer_tail_ms + std::max(0.0, e.ttft_offload_ms - e.ttft_local_ms) +
                  10 / 1e3 * (queue * compute + compute * compute / 2) * stretch,
              1e-6);
}

// An offload's compute delays every offload that arrives before its prefill worker next
// idles: with the worker busy a share rho of its time, a busy period 1 / (1 - rho) times the
// queue it sees (M/G/1), rho priced from the offloads' length classes (as this prompt when
// the router has none), at most 0.95. A busy worker's queue then costs more than the same
// queue at an idle one: a prompt the decode worker has room for stays there.
TEST(PlacementPolicyTest, AnOffloadDelaysTheOffloadsUntilItsPrefillWorkerIdles) {
  CostModel model(Params());
  PolicyConfig config;
  config.max_prefill_queue_ms = 400;  // Past it, the whole delay counts.
  auto policy = MakePlacementPolicy(config);
  ASSERT_TRUE(policy.ok());
  const double compute = 0.08 * 2000, queue = 500;
  PlacementInputs in = Inputs(2000, 0, 4, {5000});  // 800 ms of interference; 500 ms of queue.
  in.prefill[0].arrivals_per_s = 1;
  const double queue_only = 1 / 1e3 * (queue * compute + compute * compute / 2);  // 92.8 ms
  // One a second of short prompts (16 ms each): rho 0.016, the delay barely stretches.
  in.prefill[0].arrival_classes = {{.min_tokens = 181, .mean_tokens = 200, .per_s = 1}};
  PlacementDecision d = (*policy)->Decide(in, model);
  ASSERT_FALSE(d.estimate.prefill.empty());
  EXPECT_NEAR(d.estimate.prefill[0].queueing_interference_ms, queue_only / (1 - 0.016), 1e-6);
  EXPECT_TRUE(d.offload) << d.reason;
  // One a second of 10,000-token prompts (800 ms each): rho 0.8, five times the delay, still
  // below the interference.
  in.prefill[0].arrival_classes = {{.min_tokens = 9742, .mean_tokens = 10000, .per_s = 1}};
  d = (*policy)->Decide(in, model);
  EXPECT_NEAR(d.estimate.prefill[0].queueing_interference_ms, queue_only / (1 - 0.8), 1e-6);
  EXPECT_TRUE(d.offload) << d.reason;
  // Past saturation (1.2 s of work a second) at most 0.95: twenty times, 1,856 ms against 800:
  // the prompt stays with the decode worker, which has room for it.
  in.prefill[0].arrival_classes = {{.min_tokens = 4871, .mean_tokens = 5000, .per_s = 1},
                                   {.min_tokens = 9742, .mean_tokens = 10000, .per_s = 1}};
  d = (*policy)->Decide(in, model);
  EXPECT_NEAR(d.estimate.prefill[0].queueing_interference_ms, queue_only / 0.05, 1e-6);
  EXPECT_FALSE(d.offload) << d.reason;
  EXPECT_EQ(d.reason, "interference_below_transfer");
  // Without classes the offloads are priced as this prompt (160 ms at 1 a second: rho 0.16).
  in.prefill[0].arrival_classes.clear();
  d = (*policy)->Decide(in, model);
  EXPECT_NEAR(d.estimate.prefill[0].queueing_interference_ms, queue_only / (1 - 0.16), 1e-6);
}

// Only the candidate an offload goes to (the first by TTFT, whatever its place among the
// candidates) is priced by the offloads arriving there; read from its worker's arrival mix
// (as the router hands it) it is priced as from a copy of that mix.
TEST(EstimateCostsTest, TheChosenPrefillWorkersArrivalsPriceTheOffload) {
  CostModel model(Params());
  ArrivalMix busy_mix(absl::Seconds(10));
  const absl::Time now = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 20; ++i) busy_mix.Count(now - absl::Milliseconds(400 * i), 2000);
  ArrivalMix quiet_mix(absl::Seconds(10));
  quiet_mix.Count(now, 300);
  // The second candidate has the shorter queue: it is first.
  PlacementInputs from_mixes = Inputs(2000, 0, 4, {9000, 5000});
  from_mixes.prefill[0].arrival_mix = &quiet_mix;
  from_mixes.prefill[1].arrival_mix = &busy_mix;
  for (PrefillCandidate& c : from_mixes.prefill) c.arrivals_at = now;
  const CostEstimate e = EstimateCosts(from_mixes, model);
  ASSERT_EQ(e.prefill.size(), 2u);
  EXPECT_EQ(e.prefill[0].index, 1);
  EXPECT_EQ(e.prefill[1].index, 0);
  EXPECT_GT(e.prefill[0].queueing_interference_ms, 0);
  EXPECT_EQ(e.prefill[1].queueing_interference_ms, 0);  // Not priced: no offload goes there.

  PlacementInputs copied = Inputs(2000, 0, 4, {9000, 5000});
  for (int i : {0, 1}) {
    const ArrivalMix::Snapshot read = (i == 0 ? quiet_mix : busy_mix).Read(now);
    copied.prefill[i].arrivals_per_s = read.per_s;
    copied.prefill[i].arrival_classes = read.classes;
  }
  const CostEstimate c = EstimateCosts(copied, model);
  EXPECT_DOUBLE_EQ(c.prefill[0].queueing_interference_ms, e.prefill[0].queueing_interference_ms);
  EXPECT_DOUBLE_EQ(c.offload_cost_ms, e.offload_cost_ms);
  // Had the busy worker's mix been priced at the quiet one, the offload would cost less.
  copied.prefill[1].arrivals_per_s = copied.prefill[0].arrivals_per_s;
  copied.prefill[1].arrival_classes = copied.prefill[0].arrival_classes;
  EXPECT_LT(EstimateCosts(copied, model).offload_cost_ms, e.offload_cost_ms);
}

TEST(PlacementPolicyTest, ConfigErrorsNameTheFlag) {
  PolicyConfig config;
  config.name = "random";
  EXPECT_NE(MakePlacementPolicy(config).status().message().find("--policy"),
            absl::string_view::npos);
  config = PolicyConfig();
  config.alternates = 99;
  EXPECT_NE(MakePlacementPolicy(config).status().message().find("--alternates"),
            absl::string_view::npos);
  config = PolicyConfig();
  config.min_tpot_offload_tokens = 0;
  EXPECT_NE(MakePlacementPolicy(config).status().message().find("--min_tpot_offload_tokens"),
            absl::string_view::npos);
  config = PolicyConfig();
  config.slo.ttft_ms = 0;
  EXPECT_NE(MakePlacementPolicy(config).status().message().find("--slo_ttft"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace pdserve::router
