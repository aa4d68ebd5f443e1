// pdserve-sim: the simulation is deterministic, its unloaded latencies are the calibration's,
// the offload path ships KV as the link allows, the product's scheduler limits what it admits,
// the planner finds a goodput between a passing and a failing rate, and profiles are checked.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/planner.h"
#include "sim/sim_prefill_worker.h"
#include "sim/sim_profile.h"
#include "sim/sim_summary.h"
#include "sim/sim_workload.h"
#include "sim/simulator.h"
#include "sim/steady_state.h"
#include "sim/work_bound.h"
#include "tests/sim/sim_test_inputs.h"

namespace pdserve::sim {
namespace {

using testing::Config;
using testing::Poisson;
using testing::Profile;
using testing::Tokens;

TEST(SimTest, OneUnloadedRequestTakesTheCalibratedTime) {
  SimRequest r;
  r.prompt = Tokens(100, 1);
  r.max_tokens = 3;
  auto result = Simulate(Config("always_local", 1, 0), {r});
  ASSERT_TRUE(result.ok()) << result.status();
  const SimRequestResult& out = result->requests[0];
  ASSERT_TRUE(out.ok) << out.error;
  // Client -> decode hop, one 100-token prefill step (10 + 0.1 * 100), the hop back.
  EXPECT_NEAR(out.ttft_ms, 0.5 + 20 + 0.5, 1e-6);
  // Each further token: one decode step (10 + 1).
  EXPECT_NEAR(out.tpot_ms, 11, 1e-6);
  EXPECT_EQ(out.output_tokens, 3);
  EXPECT_FALSE(out.offloaded);
  EXPECT_EQ(result->counters.steps, 3u);
}

TEST(SimTest, AnOffloadedRequestWaitsForItsPrefillAndTransfer) {
  SimRequest r;
  r.prompt = Tokens(400, 2);
  r.max_tokens = 2;
  auto result = Simulate(Config("always_offload", 1, 1), {r});
  ASSERT_TRUE(result.ok()) << result.status();
  const SimRequestResult& out = result->requests[0];
  ASSERT_TRUE(out.ok) << out.error;
  EXPECT_TRUE(out.offloaded);
  EXPECT_EQ(out.reason, "policy_always_offload");  // The router's, in requests.csv.
  // Hops: client -> decode -> prefill, prefill (5 + 0.05 * 400 = 25 ms) with its layer-wise
  // transfer, the answer back to decode, the first token to the client.
  const WorkerShape& shape = Profile().shape;
  const double bytes = 400.0 * shape.kv_bytes_per_token();
  const double transfer_end =
      TransferEndMs(25, bytes, 2, LinkModel{.bytes_per_ms = 1e6, .latency_ms = 1});
  EXPECT_NEAR(out.ttft_ms, 0.5 + 0.5 + transfer_end + 0.5 + 0.5, 1e-6);
  EXPECT_EQ(result->counters.prefill_batches, 1u);
}

// The simulated prefill worker takes its queue in the product's order: a job due sooner goes
// ahead of one queued before it (prefill::InsertByDue), equals in arrival order.
TEST(SimTest, ThePrefillQueueIsEarliestDueFirst) {
  WorkerShape shape = Profile().shape;
  shape.prefill_max_batch_tokens = 100;  // One 100-token job a forward.
  SimPrefillWorker worker(shape, Profile().timing, LinkModel{});
  worker.Submit({.request = 0, .prompt_tokens = 100, .transfer_tokens = 100, .due_ms = 0});
  ASSERT_GT(worker.StartBatch(0), 0);  // Computing request 0.
  worker.Submit({.request = 1, .prompt_tokens = 100, .transfer_tokens = 100, .due_ms = 9000});
  worker.Submit({.request = 2, .prompt_tokens = 100, .transfer_tokens = 100, .due_ms = 900});
  worker.Submit({.request = 3, .prompt_tokens = 100, .transfer_tokens = 100, .due_ms = 9000});
  std::vector<int> order;
  for (int i = 0; i < 4; ++i) {
    for (const SimPrefillDone& d : worker.FinishBatch()) order.push_back(d.job.request);
    worker.StartBatch(0);
  }
  EXPECT_EQ(order, (std::vector<int>{0, 2, 1, 3}));
}

TEST(SimTest, LayerwiseTransfersOverlapTheForwardAndBulkOnesFollowIt) {
  const LinkModel fast{.bytes_per_ms = 1e6, .latency_ms = 1, .layerwise = true};
  // 4 layers of 1 MB: 1 ms each on the link, the forward 40 ms: only the last layer follows
  // the forward (then the latency).
  EXPECT_DOUBLE_EQ(TransferEndMs(40, 4e6, 4, fast), 40 + 1 + 1);
  EXPECT_DOUBLE_EQ(TransferEndMs(40, 4000, 4, fast), 40 + 1e-3 + 1);
  // A slow link: the first layer, then every layer back to back.
  const LinkModel slow{.bytes_per_ms = 100, .latency_ms = 0, .layerwise = true};
  EXPECT_DOUBLE_EQ(TransferEndMs(40, 4000, 4, slow), 10 + 40);
  LinkModel bulk = slow;
  bulk.layerwise = false;
  EXPECT_DOUBLE_EQ(TransferEndMs(40, 4000, 4, bulk), 40 + 40);
}

TEST(SimTest, TheSameInputsGiveTheSameOutputsAndJitterChangesThem) {
  const std::vector<SimRequest> requests = Poisson(300, 20, 300, 20);
  SimConfig config = Config("cost_model", 2, 1);
  config.step_jitter = 0.2;
  auto a = Simulate(config, requests);
  auto b = Simulate(config, requests);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->requests.size(), b->requests.size());
  for (size_t i = 0; i < a->requests.size(); ++i) {
    EXPECT_EQ(a->requests[i].ttft_ms, b->requests[i].ttft_ms) << i;
    EXPECT_EQ(a->requests[i].tpot_ms, b->requests[i].tpot_ms) << i;
    EXPECT_EQ(a->requests[i].offloaded, b->requests[i].offloaded) << i;
  }
  EXPECT_EQ(a->counters.events, b->counters.events);
  EXPECT_EQ(a->counters.sequences_left, 0u);
  EXPECT_EQ(a->counters.blocks_held_at_end, 0u);
  config.seed = 2;
  auto c = Simulate(config, requests);
  ASSERT_TRUE(c.ok());
  int differ = 0;
  for (size_t i = 0; i < a->requests.size(); ++i)
    differ += a->requests[i].ttft_ms != c->requests[i].ttft_ms ? 1 : 0;
  EXPECT_GT(differ, 100);
}

// The product's scheduler runs the worker: with a pool of 40 blocks (640 tokens), two requests
// of 300 + 200 tokens both get in (19 blocks each for prompt + 1) but cannot both grow to 32:
// one is preempted and recomputed, and both still end with all their tokens.
TEST(SimTest, TheSchedulersBlockLimitPreemptsAndLosesNothing) {
  SimConfig config = Config("always_local", 1, 0);
  config.profile.shape.kv_layout.num_blocks = 40;
  std::vector<SimRequest> requests(2);
  for (int i = 0; i < 2; ++i) {
    requests[i].prompt = Tokens(300, 10 + i);
    requests[i].max_tokens = 200;
  }
  auto result = Simulate(config, requests);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->requests[0].ok && result->requests[1].ok);
  EXPECT_EQ(result->requests[0].output_tokens, 200);
  EXPECT_EQ(result->requests[1].output_tokens, 200);
  EXPECT_GE(result->counters.preemptions, 1u);
  EXPECT_EQ(result->counters.blocks_held_at_end, 0u);  // Preemption and finish free them all.
  // The preempted one ends after the other: its TPOT carries the wait and the recompute.
  EXPECT_GT(std::max(result->requests[0].tpot_ms, result->requests[1].tpot_ms),
            1.2 * std::min(result->requests[0].tpot_ms, result->requests[1].tpot_ms));
}

// A follow-up turn is sent after its earlier turn ends, behind that turn's prompt and output,
// and finds them in the prefix cache of the worker that served it.
TEST(SimTest, FollowUpsReuseTheirEarlierTurnsKv) {
  std::vector<SimRequest> requests(2);
  requests[0].prompt = Tokens(200, 3);
  requests[0].max_tokens = 40;
  requests[1].arrival_s = 0.001;
  requests[1].prompt = Tokens(20, 4);
  requests[1].max_tokens = 4;
  requests[1].follow_up_of = 0;
  auto result = Simulate(Config("always_local", 2, 0), requests);
  ASSERT_TRUE(result.ok()) << result.status();
  const SimRequestResult& second = result->requests[1];
  ASSERT_TRUE(second.ok);
  EXPECT_EQ(second.prompt_tokens, 200 + 40 + 20);
  EXPECT_GE(second.sent_ms, result->requests[0].e2e_ms);
  EXPECT_EQ(second.decode_worker, result->requests[0].decode_worker);
  EXPECT_GE(second.cached_tokens, 224);  // Every full block of the earlier turn's KV.
  EXPECT_GT(result->counters.prefix_hit_tokens, 0u);
}

TEST(SimTest, BadInputIsRefusedNamingTheField) {
  SimRequest r;
  r.prompt = Tokens(10, 0);
  r.max_tokens = 0;
  auto result = Simulate(Config("cost_model", 1, 1), {r});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("max_tokens"), std::string::npos);
  r.max_tokens = 1;
  r.follow_up_of = 0;
  EXPECT_FALSE(Simulate(Config("cost_model", 1, 1), {r}).ok());
  SimConfig bad = Config("cost_model", 0, 1);
  EXPECT_NE(Simulate(bad, {}).status().message().find("decode_workers"), std::string::npos);
  bad = Config("no_such_policy", 1, 1);
  EXPECT_FALSE(Simulate(bad, {}).ok());
  // A request larger than any worker: an error of its own, the others unaffected.
  SimRequest huge;
  huge.prompt = Tokens(5000, 0);
  huge.max_tokens = 1;
  auto mixed =
      Simulate(Config("cost_model", 1, 1),
               {huge, SimRequest{.arrival_s = 0, .prompt = Tokens(10, 1), .max_tokens = 2}});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_FALSE(mixed->requests[0].ok);
  EXPECT_NE(mixed->requests[0].error.find("prompt"), std::string::npos);
  EXPECT_TRUE(mixed->requests[1].ok);
  EXPECT_EQ(mixed->counters.rejected, 1u);
}

TEST(SimProfileTest, TheClusterObjectSetsTheShapeAndTyposAreErrors) {
  const std::string base =
      R"({"step": {"intercept_ms": 3, "per_prefill_attention_ms": 1e-6}, "cluster": {)";
  auto p = ParseSimProfile(
      base + R"("num_layers": 8, "kv_blocks": 100, "dtype": "bf16", "max_awaiting_kv": 64}})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->has_shape);
  EXPECT_EQ(p->shape.max_awaiting_kv, 64);
  EXPECT_EQ(p->shape.kv_layout.num_layers, 8);
  EXPECT_EQ(p->shape.kv_layout.num_blocks, 100);
  EXPECT_EQ(p->shape.kv_layout.dtype, DType::kBF16);
  EXPECT_DOUBLE_EQ(p->timing.step_intercept_ms, 3);
  EXPECT_DOUBLE_EQ(p->timing.step_per_prefill_attention_ms, 1e-6);
  auto typo = ParseSimProfile(base + R"("kv_blokcs": 100}})");
  EXPECT_NE(typo.status().message().find("kv_blokcs"), std::string::npos);
  auto none = ParseSimProfile(base + R"("max_awaiting_kv": 0}})");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_NE(none->shape.Validate().message().find("max_awaiting_kv"), std::string::npos);
  auto bad = ParseSimProfile(base + R"("dtype": "f8"}})");
  EXPECT_NE(bad.status().message().find("cluster.dtype"), std::string::npos);
  EXPECT_FALSE(ParseSimProfile("[1]").ok());
}

// The GPU profiles the planner ships with load and describe a real worker.
TEST(SimProfileTest, TheGpuProfilesHaveAWorkerShape) {
  for (const char* name :
       {"h100-llama3-8b", "h100-llama3-70b", "h200-llama3-8b", "h200-llama3-70b"}) {
    auto p = LoadSimProfile(std::string(PDSERVE_SOURCE_DIR) + "/deploy/profiles/" + name + ".json");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(p->has_shape) << name;
    EXPECT_TRUE(p->shape.Validate().ok()) << name;
    EXPECT_GT(p->shape.kv_layout.num_blocks, 10000) << name;
  }
}

// At 2x its rate a 10 s window repeats until the measured arrivals span 20 s (four copies),
// after 3 s of its end and before 4 s of its start, which load the cluster unmeasured.
TEST(SteadyStateTest, TheWindowRepeatsUntilTheMeasuredSpanWithLoadAroundIt) {
  const std::vector<SimRequest> window = Poisson(50, 5, 40, 4);
  const double span = window.back().arrival_s - window.front().arrival_s;
  const double period = span * 50 / 49;
  ASSERT_GT(period, 20.0 / 4 * 2);  // So that four copies (not five) cover 20 s at 2x.
  ASSERT_LT(period, 20.0 / 3 * 2);
  const SteadyState steady{.warmup_s = 3, .measure_s = 20, .cooldown_s = 4};
  auto run = SteadyStateRequests(window, 2, steady, 32000);
  ASSERT_TRUE(run.ok()) << run.status();
  std::vector<const SimRequest*> measured, before, after;
  for (const SimRequest& r : *run) {
    if (r.measured) {
      measured.push_back(&r);
    } else {
      (measured.empty() ? before : after).push_back(&r);
    }
  }
  ASSERT_EQ(measured.size(), 4 * window.size());
  ASSERT_FALSE(before.empty());
  ASSERT_FALSE(after.empty());
  // Virtual seconds are the window's seconds / 2.
  auto virtual_s = [](const SimRequest* r) { return r->arrival_s / 2; };
  EXPECT_GE(virtual_s(measured.back()) - virtual_s(measured.front()), 20 - period / 2);
  EXPECT_LE(virtual_s(measured.front()) - virtual_s(before.front()), 3 + 1e-9);
  EXPECT_LE(virtual_s(after.back()) - virtual_s(measured.back()), 4 + period / 2 / 49 + 1e-9);
  for (size_t i = 1; i < run->size(); ++i)
    EXPECT_LE((*run)[i - 1].arrival_s, (*run)[i].arrival_s) << i;
  // The warm-up is the window's end, the cool-down its start, in the window's order.
  EXPECT_EQ(before.back()->max_tokens, window.back().max_tokens);
  EXPECT_EQ(after.front()->prompt.size(), window.front().prompt.size());
  // Copies repeat the window's lengths but share no tokens at the same position.
  for (size_t c = 1; c < 4; ++c) {
    for (size_t i = 0; i < window.size(); ++i) {
      const SimRequest& a = *measured[i];
      const SimRequest& b = *measured[c * window.size() + i];
      ASSERT_EQ(a.prompt.size(), b.prompt.size());
      EXPECT_NE(a.prompt.front(), b.prompt.front());
    }
  }
}

// The load outlasts the measured requests' objectives, whatever --cooldown_s says (and starts
// one such life before them, whatever --warmup_s says): a request
// with 1,000 output tokens at 25 ms and a 2 s TTFT may end 26.975 s after it is sent, and
// its follow-up (sent when it ends) as long again. Until then requests keep arriving, so that
// no measured stream finishes in a draining cluster.
TEST(SteadyStateTest, TheLoadSpansEveryMeasuredRequestsLifeAtItsObjectives) {
  std::vector<SimRequest> window = Poisson(20, 5, 40, 4);
  const double first = window.front().arrival_s;
  const double period = (window.back().arrival_s - first) * 20 / 19;
  double gap = period / 20;  // The widest between two arrivals: how far a cut may fall short.
  for (size_t i = 1; i < window.size(); ++i)
    gap = std::max(gap, window[i].arrival_s - window[i - 1].arrival_s);
  const SteadyState steady{.warmup_s = 1, .measure_s = 10, .cooldown_s = 2};
  auto last_after_measured = [&](const std::vector<SimRequest>& run) {
    double last_measured = 0, last = 0;
    for (const SimRequest& r : run) {
      if (r.measured) last_measured = std::max(last_measured, r.arrival_s);
      last = std::max(last, r.arrival_s);
    }
    return last - last_measured;
  };
  // Without objectives: cooldown_s (window seconds = virtual at 1x), to within a gap.
  auto plain = SteadyStateRequests(window, 1, steady, 32000);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_LE(last_after_measured(*plain), 2 + gap + 1e-9);

  const router::SloConfig slo{.ttft_ms = 2000, .tpot_ms = 25};
  for (SimRequest& r : window) {
    r.slo = slo;
    r.max_tokens = 4;
  }
  window[3].max_tokens = 1000;  // Ends by 26.975 s after it is sent.
  auto one_long = SteadyStateRequests(window, 1, steady, 32000);
  ASSERT_TRUE(one_long.ok()) << one_long.status();
  const double life = 2 + 999 * 0.025;
  // The last measured copy's request 3 arrives (period - (its offset)) before the measured
  // span's last arrival at most; arrivals go on until its deadline.
  const double offset3 = window[3].arrival_s - first;
  EXPECT_GE(last_after_measured(*one_long), life - (period - offset3) - gap);
  EXPECT_GT(last_after_measured(*one_long), 10);
  // And it starts one such life before the first measured arrival (warmup_s is 1 s).
  double first_measured = 1e300, first_any = 1e300;
  for (const SimRequest& r : *one_long) {
    if (r.measured) first_measured = std::min(first_measured, r.arrival_s);
    first_any = std::min(first_any, r.arrival_s);
  }
  EXPECT_GE(first_measured - first_any, life - gap);

  // A follow-up of it doubles the time: it is sent when request 3 ends.
  SimRequest follow = window[3];
  follow.follow_up_of = 3;
  follow.arrival_s = window[3].arrival_s + 0.5;
  follow.prompt = {5, 6};
  window.insert(window.begin() + 4, follow);
  auto chained = SteadyStateRequests(window, 1, steady, 32000);
  ASSERT_TRUE(chained.ok()) << chained.status();
  EXPECT_GE(last_after_measured(*chained), last_after_measured(*one_long) + life - gap);
  // At 2x the rate, the same virtual seconds are twice the window's seconds.
  auto twice = SteadyStateRequests(window, 2, steady, 32000);
  ASSERT_TRUE(twice.ok()) << twice.status();
  EXPECT_GE(last_after_measured(*twice), 2 * last_after_measured(*chained) - 2 * period);
}

// Requests that share a prefix in the window share it within every copy, never across; a
// follow-up points at its earlier turn's copy, and one whose earlier turn fell outside the
// warm-up is dropped.
TEST(SteadyStateTest, SharingStaysWithinACopyAndFollowUpsFollowTheirTurn) {
  std::vector<SimRequest> window(3);
  window[0].prompt = Tokens(64, 1);
  window[1].arrival_s = 1;
  window[1].prompt = Tokens(32, 1);  // The first 32 tokens of request 0's.
  window[1].prompt.push_back(7);
  window[2].arrival_s = 2;
  window[2].prompt = {100, 101};
  window[2].follow_up_of = 0;
  const SteadyState steady{.warmup_s = 1.5, .measure_s = 9, .cooldown_s = 0};
  auto run = SteadyStateRequests(window, 1, steady, 32000);
  ASSERT_TRUE(run.ok()) << run.status();
  // Period 3 s: the warm-up holds the last copy's requests after -1.5 s: request 2 only, whose
  // earlier turn is cut off, so nothing; then three measured copies.
  ASSERT_EQ(run->size(), 9u);
  for (size_t c = 0; c < 3; ++c) {
    const SimRequest* copy = &(*run)[3 * c];
    EXPECT_TRUE(copy[0].measured);
    EXPECT_TRUE(
        std::equal(copy[1].prompt.begin(), copy[1].prompt.begin() + 32, copy[0].prompt.begin()));
    EXPECT_EQ(copy[2].follow_up_of, static_cast<int>(3 * c));
    if (c > 0) {
      EXPECT_NE(copy[0].prompt, (*run)[0].prompt);
    }
  }
}

TEST(SteadyStateTest, OffItIsTheWindowAndBadInputNamesTheFlag) {
  const std::vector<SimRequest> window = Poisson(5, 1, 10, 2);
  auto same = SteadyStateRequests(window, 3, SteadyState{.measure_s = 0}, 32000);
  ASSERT_TRUE(same.ok());
  ASSERT_EQ(same->size(), window.size());
  for (size_t i = 0; i < window.size(); ++i) {
    EXPECT_EQ((*same)[i].arrival_s, window[i].arrival_s);
    EXPECT_TRUE((*same)[i].measured);
  }
  auto negative = SteadyStateRequests(window, 1, SteadyState{.warmup_s = -1}, 32000);
  EXPECT_NE(negative.status().message().find("--warmup_s"), std::string::npos);
  auto one = SteadyStateRequests({window[0]}, 1, SteadyState{}, 32000);
  EXPECT_EQ(one.status().code(), absl::StatusCode::kInvalidArgument);
  auto token = SteadyStateRequests(window, 1, SteadyState{}, 20);
  EXPECT_NE(token.status().message().find("vocabulary"), std::string::npos);
  // A rate the window cannot cover without millions of copies.
  auto huge = SteadyStateRequests(window, 1e7, SteadyState{}, 32000);
  EXPECT_NE(huge.status().message().find("copies"), std::string::npos);
}

// The bound by hand, on the test profile (intercept 10 ms, 1 ms a decode token, prefill 0.1 ms
// a token in a step or 5 + 0.05 ms a token on a prefill worker).
TEST(WorkBoundTest, PricesEachRequestWhereItIsCheapestAndTheStepsAtTheObjective) {
  std::vector<SimRequest> requests(3);
  requests[0].prompt = Tokens(100, 1);  // Prefill 10 in a step = 5 + 5 on a prefill worker.
  requests[0].max_tokens = 5;           // 4 decodes: 4 ms.
  requests[1].prompt = Tokens(400, 2);  // 25 on a prefill worker.
  requests[1].max_tokens = 3;           // 2 ms.
  requests[2].prompt = Tokens(48, 1);   // Request 0's first 3 blocks: its 48 tokens cached,
  requests[2].prompt.push_back(9);      // one left: 0.1 ms in a step.
  requests[2].max_tokens = 1;           // No decode.
  const WorkBound b = ComputeWorkBound(requests, Profile(), 40);
  EXPECT_NEAR(b.prefill_ms, (10 + 25 + 0.1) / 3, 1e-9);
  EXPECT_NEAR(b.decode_ms, (4 + 2) / 3.0, 1e-9);
  EXPECT_DOUBLE_EQ(b.intercept_share, 10.0 / 40);
  EXPECT_NEAR(b.per_gpu, 1000 / (b.prefill_ms + b.decode_ms / 0.75), 1e-9);
  // Two GPUs a worker: half per GPU. A follow-up reuses its earlier turn whole.
  SimProfile two = Profile();
  two.shape.gpus_per_worker = 2;
  EXPECT_NEAR(ComputeWorkBound(requests, two, 40).per_gpu, b.per_gpu / 2, 1e-9);
  requests[2].prompt = {9};
  requests[2].follow_up_of = 0;
  EXPECT_NEAR(ComputeWorkBound(requests, Profile(), 40).prefill_ms, (10 + 25 + 0.1) / 3, 1e-9);
  // An objective under one step's fixed cost: nothing can meet it.
  EXPECT_EQ(ComputeWorkBound(requests, Profile(), 9).per_gpu, 0);
}

// Objectives of a few hundred ms: 10 s measured are dozens of them.
constexpr SteadyState kShortSteadyState{.warmup_s = 2, .measure_s = 10, .cooldown_s = 2};

// A goodput search of one decode worker, every prompt local, tight objectives: a knee within a
// few doublings of the workload's own rate.
struct LocalKneeSearch {
  LocalKneeSearch() {
    config.policy.slo.ttft_ms = 200;
    config.policy.slo.tpot_ms = 40;
    plan.bisect_steps = 3;
    plan.steady_state = kShortSteadyState;
  }
  // Points of this search only; simulations counted over all.
  absl::StatusOr<double> Run(double start = 1.0) {
    points.clear();
    return SearchGoodput(config, requests, start, plan, &points, &simulations);
  }
  const std::vector<SimRequest> requests = Poisson(200, 5, 200, 16);
  SimConfig config = Config("always_local", 1, 0);
  PlanConfig plan;
  std::vector<PointSummary> points;
  int simulations = 0;
};

// The goodput search brackets the knee: some rate above the returned one fails, and
// attainment falls as the rate rises.
TEST(PlannerTest, GoodputSearchBracketsTheKnee) {
  LocalKneeSearch search;
  auto multiple = search.Run();
  ASSERT_TRUE(multiple.ok()) << multiple.status();
  EXPECT_GT(*multiple, 0);
  const std::vector<PointSummary>& points = search.points;
  EXPECT_EQ(search.simulations, static_cast<int>(points.size()));
  // Rates are offered rates: the requests' own times the multiple.
  bool passed_at_goodput = false, failed_above = false;
  const double goodput_rate = *multiple * OfferedRate(search.requests);
  for (const PointSummary& p : points) {
    if (std::abs(p.rate / goodput_rate - 1) < 1e-9) passed_at_goodput = p.attainment >= 0.9;
    if (p.rate > goodput_rate * 1.001) failed_above |= p.attainment < 0.9;
  }
  EXPECT_TRUE(passed_at_goodput);
  EXPECT_TRUE(failed_above);
  EXPECT_GE(points.front().attainment, points.back().attainment);
}

// The flaw steady state fixes: a window replayed once is a burst, and a burst a few TTFT
// objectives long "sustains" rates the cluster cannot (the objective absorbs the queue a short
// overload builds; the planner once read 29.6 requests/s per GPU where the work allows 25.4).
// Judged at steady state the same configuration stays under the work bound; the burst reads
// 1.4x higher (the work bound here is loose: it prices prefill at the prefill worker's
// cheaper rate, which always_local cannot use).
TEST(PlannerTest, ABurstOverstatesGoodputAndSteadyStateStaysUnderTheWorkBound) {
  LocalKneeSearch search;
  // TTFT-bound: prefills queue. The window is 40 s at its own rate: 10 objectives at 1x, 6 at
  // the steady-state knee.
  search.config.policy.slo.ttft_ms = 4000;
  search.config.policy.slo.tpot_ms = 1000;
  const WorkBound bound =
      ComputeWorkBound(search.requests, search.config.profile, search.config.policy.slo.tpot_ms);
  ASSERT_GT(bound.per_gpu, 0);
  const double bound_multiple = bound.per_gpu / OfferedRate(search.requests);
  auto steady = search.Run();
  ASSERT_TRUE(steady.ok()) << steady.status();
  EXPECT_GT(*steady, 0);
  EXPECT_LE(*steady, bound_multiple);
  search.plan.steady_state.measure_s = 0;  // The window once.
  auto burst = search.Run();
  ASSERT_TRUE(burst.ok()) << burst.status();
  EXPECT_GT(*burst, 1.2 * *steady) << "bound " << bound_multiple;
}

TEST(PlannerTest, PlanSearchesEverySplitAndComparesWithTheBestFixedPolicy) {
  const std::vector<SimRequest> requests = Poisson(150, 5, 600, 16);
  PlanConfig plan;
  plan.base = Config("cost_model", 1, 1);
  plan.base.policy.slo.ttft_ms = 300;
  plan.base.policy.slo.tpot_ms = 40;
  plan.gpus = 3;
  plan.thresholds = {256, 1024};
  plan.bisect_steps = 2;
  plan.steady_state = kShortSteadyState;
  plan.progress = false;
  auto result = RunPlan(plan, requests);
  ASSERT_TRUE(result.ok()) << result.status();
  // always_local 0P:3D; always_offload at 1P:2D and 2P:1D; cost_model at those and at 0P:3D
  // (no prefill worker: it prefills locally); length_threshold at the three splits and both
  // thresholds.
  EXPECT_EQ(result->candidates.size(), 1u + 2 + 6 + 3);
  for (const PlanCandidate& c : result->candidates) {
    EXPECT_TRUE(c.prefill_workers > 0 || c.policy != "always_offload") << c.policy;
  }
  EXPECT_EQ(result->best_of_policy.size(), 4u);
  double best_fixed = 0, cost_model = 0;
  for (const PlanCandidate& c : result->candidates) {
    EXPECT_EQ(c.decode_workers + c.prefill_workers, 3);
    EXPECT_FALSE(c.points.empty());
    (c.policy == "cost_model" ? cost_model : best_fixed) =
        std::max(c.policy == "cost_model" ? cost_model : best_fixed, c.goodput);
  }
  ASSERT_GT(best_fixed, 0);
  EXPECT_DOUBLE_EQ(result->cost_model_over_best_fixed, cost_model / best_fixed);
  const std::string text = FormatPlan(*result);
  EXPECT_NE(text.find("best: "), std::string::npos);
  EXPECT_NE(text.find("work bound: "), std::string::npos);
  // Every goodput stays under the work bound, and the bound over the best fixed policy is
  // the most any policy could reach.
  ASSERT_GT(result->bound.per_gpu, 0);
  for (const PlanCandidate& c : result->candidates)
    EXPECT_LE(c.goodput_per_gpu, result->bound.per_gpu) << c.Name();
  EXPECT_DOUBLE_EQ(result->bound_over_best_fixed, result->bound.per_gpu * 3 / best_fixed);
  EXPECT_GE(result->bound_over_best_fixed, result->cost_model_over_best_fixed);
  plan.trace_name = "azure_llm_2023_conv.csv";
  auto named = RunPlan(plan, requests);
  ASSERT_TRUE(named.ok());
  const nlohmann::json json = ToJson(*named);
  EXPECT_EQ(json.value("goodput_cost_model_over_best_fixed_azure_llm_2023_conv", -1.0),
            named->cost_model_over_best_fixed);
  EXPECT_EQ(json.value("work_bound_over_best_fixed", -1.0), named->bound_over_best_fixed);
}

// A configuration's goodput does not depend on where its search starts: the start snaps to a
// power of two, so every search brackets and bisects the same interval.
TEST(PlannerTest, GoodputDoesNotDependOnTheSearchStart) {
  LocalKneeSearch search;
  auto from_one = search.Run();
  ASSERT_TRUE(from_one.ok()) << from_one.status();
  ASSERT_GT(*from_one, 0);
  for (double start : {0.3, 2.9, *from_one * 1.3}) {
    auto other = search.Run(start);
    ASSERT_TRUE(other.ok()) << other.status();
    EXPECT_DOUBLE_EQ(*other, *from_one) << "start " << start;
  }
}

PlanConfig SmallPlan(int gpus) {
  PlanConfig plan;
  plan.base = Config("cost_model", 1, 1);
  plan.base.policy.slo.ttft_ms = 300;
  plan.base.policy.slo.tpot_ms = 40;
  plan.gpus = gpus;
  plan.policies = {"always_offload", "length_threshold", "cost_model"};
  plan.thresholds = {256, 1024};
  plan.bisect_steps = 2;
  plan.steady_state = kShortSteadyState;
  plan.progress = false;
  return plan;
}

// Searches on several threads give the answer one thread gives, configuration by
// configuration.
TEST(PlannerTest, JobsDoNotChangeTheAnswer) {
  const std::vector<SimRequest> requests = Poisson(150, 5, 600, 16);
  PlanConfig plan = SmallPlan(4);
  auto one = RunPlan(plan, requests);
  ASSERT_TRUE(one.ok()) << one.status();
  plan.jobs = 3;
  auto three = RunPlan(plan, requests);
  ASSERT_TRUE(three.ok()) << three.status();
  ASSERT_EQ(one->candidates.size(), three->candidates.size());
  for (size_t i = 0; i < one->candidates.size(); ++i) {
    EXPECT_EQ(one->candidates[i].Name(), three->candidates[i].Name());
    EXPECT_DOUBLE_EQ(one->candidates[i].goodput, three->candidates[i].goodput)
        << one->candidates[i].Name();
  }
  EXPECT_EQ(one->simulations, three->simulations);
  EXPECT_DOUBLE_EQ(one->cost_model_over_best_fixed, three->cost_model_over_best_fixed);
}

// A coarse split step searches fewer splits (the coarse grid, then every split between the
// best one's neighbours) and, where goodput rises then falls over the splits, finds each
// policy's best split and goodput as the full search does.
TEST(PlannerTest, CoarseSplitStepFindsTheBestSplitWithFewerSimulations) {
  const std::vector<SimRequest> requests = Poisson(150, 5, 600, 16);
  PlanConfig plan = SmallPlan(11);
  plan.policies = {"always_offload", "cost_model"};
  auto full = RunPlan(plan, requests);
  ASSERT_TRUE(full.ok()) << full.status();
  plan.split_step = 3;
  auto coarse = RunPlan(plan, requests);
  ASSERT_TRUE(coarse.ok()) << coarse.status();
  EXPECT_LT(coarse->simulations, full->simulations);
  EXPECT_LT(coarse->candidates.size(), full->candidates.size());
  for (const auto& [policy, i] : full->best_of_policy) {
    ASSERT_TRUE(coarse->best_of_policy.contains(policy));
    const PlanCandidate& want = full->candidates[i];
    const PlanCandidate& got = coarse->candidates[coarse->best_of_policy.at(policy)];
    EXPECT_EQ(got.Name(), want.Name());
    EXPECT_DOUBLE_EQ(got.goodput, want.goodput);
  }
}

// The worst prompt-length quartile: eight requests, the two longest (wherever they are in the
// result) missing TTFT, is 75 % attainment overall and 0 in the longest quartile.
TEST(SummaryTest, WorstQuartileAttainmentFindsAGivenUpClass) {
  const router::SloConfig slo{.ttft_ms = 100, .tpot_ms = 10};
  SimResult result;
  for (int tokens : {300, 800, 100, 700, 200, 600, 400, 500}) {
    SimRequestResult r;
    r.ok = true;
    r.prompt_tokens = tokens;
    r.ttft_ms = tokens >= 700 ? 500 : 50;
    r.tpot_ms = 5;
    result.requests.push_back(r);
  }
  PointSummary s = Summarize(result, 1, slo);
  EXPECT_DOUBLE_EQ(s.attainment, 0.75);
  EXPECT_DOUBLE_EQ(s.worst_quartile_attainment, 0);
  // One of the two fixed: the longest quartile at 50 %.
  result.requests[1].ttft_ms = 50;
  s = Summarize(result, 1, slo);
  EXPECT_DOUBLE_EQ(s.worst_quartile_attainment, 0.5);
  // Spread over the quartiles instead: every quartile keeps 50 % or more.
  result.requests[5].ttft_ms = 500;  // 600 tokens: the third quartile.
  result.requests[4].ttft_ms = 500;  // 200 tokens: the first.
  result.requests[3].ttft_ms = 50;
  s = Summarize(result, 1, slo);
  EXPECT_DOUBLE_EQ(s.attainment, 0.75);
  EXPECT_DOUBLE_EQ(s.worst_quartile_attainment, 0.5);
  EXPECT_TRUE(ToJson(s).contains("worst_quartile_attainment"));
}

// The load around the measured requests is not counted: failing warm-up requests change
// neither the attainment nor the percentiles.
TEST(SummaryTest, OnlyMeasuredRequestsCount) {
  const router::SloConfig slo{.ttft_ms = 100, .tpot_ms = 10};
  SimResult result;
  for (int i = 0; i < 6; ++i) {
    SimRequestResult r;
    r.ok = true;
    r.prompt_tokens = 10 + i;
    r.measured = i >= 2;
    r.ttft_ms = r.measured ? 50 : 5000;
    r.tpot_ms = 5;
    result.requests.push_back(r);
  }
  const PointSummary s = Summarize(result, 1, slo);
  EXPECT_EQ(s.requests, 4);
  EXPECT_DOUBLE_EQ(s.attainment, 1);
  EXPECT_DOUBLE_EQ(s.worst_quartile_attainment, 1);
  EXPECT_DOUBLE_EQ(s.ttft_ms.p90, 50);
}

// Goodput per quartile: the search only passes rates where every prompt-length quartile meets
// the target, so it is never above the usual goodput.
TEST(PlannerTest, PerQuartileGoodputHoldsEveryQuartileToTheTarget) {
  LocalKneeSearch search;
  auto overall = search.Run();
  ASSERT_TRUE(overall.ok()) << overall.status();
  search.plan.per_quartile = true;
  auto per_quartile = search.Run();
  ASSERT_TRUE(per_quartile.ok()) << per_quartile.status();
  EXPECT_LE(*per_quartile, *overall);
  bool found = false;
  for (const PointSummary& p : search.points) {
    if (std::abs(p.rate / (*per_quartile * OfferedRate(search.requests)) - 1) > 1e-9) continue;
    found = true;
    EXPECT_GE(p.worst_quartile_attainment, 0.9);
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace pdserve::sim
