// The rebalancing planner: when a switch pays, which worker moves, and what holds it back
// (hysteresis, the rate limit, a role that would be left empty or overloaded, a switch in
// progress, a worker that cannot switch).
#include "router/rebalance_planner.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace pdserve::router {
namespace {

constexpr absl::Time kStart = absl::FromUnixSeconds(1000);

PlannerWorker Decode(const std::string& id, int streams, double step_ms, bool can_switch = true) {
  return PlannerWorker{.worker_id = id,
                       .role = WorkerRole::kDecode,
                       .can_switch = can_switch,
                       .accepting = true,
                       .streams = streams,
                       .step_ms = step_ms,
                       .base_step_ms = 5};
}

PlannerWorker Prefill(const std::string& id, double backlog_s, bool can_switch = true) {
  return PlannerWorker{.worker_id = id,
                       .role = WorkerRole::kPrefill,
                       .can_switch = can_switch,
                       .accepting = true,
                       .backlog_s = backlog_s};
}

PlannerSnapshot Snapshot(std::vector<PlannerWorker> workers) {
  return PlannerSnapshot{.workers = std::move(workers), .slo = {.ttft_ms = 1000, .tpot_ms = 50}};
}

RebalanceConfig Config() {
  return RebalanceConfig{.interval = absl::Seconds(2),
                         .min_between = absl::Seconds(60),
                         .confirm = 3,
                         .high = 0.5,
                         .margin = 0.1};
}

// Looks `n` times, 2 s apart from `*now`; the last look's orders.
std::vector<RebalanceOrder> LookTimesAll(RebalancePlanner& planner, const PlannerSnapshot& s, int n,
                                         absl::Time* now) {
  std::vector<RebalanceOrder> orders;
  for (int i = 0; i < n; ++i) {
    orders = planner.Look(s, *now);
    if (!orders.empty() && i + 1 < n) ADD_FAILURE() << "ordered at look " << i + 1;
    *now += absl::Seconds(2);
  }
  return orders;
}

// The same, for a look expected to order at most one move: that order.
std::optional<RebalanceOrder> LookTimes(RebalancePlanner& planner, const PlannerSnapshot& s, int n,
                                        absl::Time* now) {
  std::vector<RebalanceOrder> orders = LookTimesAll(planner, s, n, now);
  EXPECT_LE(orders.size(), 1u);
  if (orders.empty()) return std::nullopt;
  return orders.front();
}

TEST(RebalancePlannerTest, PressuresSpreadEachRolesWorkOverItsWorkers) {
  // Decode: 5 ms fixed, 20 + 10 ms of work over 2 workers; TPOT 50 ms.
  PlannerWorker local = Decode("d1", 2, 15);
  local.backlog_s = 0.2;  // Prompts it prefills itself.
  const PlannerSnapshot s =
      Snapshot({Decode("d0", 4, 25), local, Prefill("p0", 0.6), Prefill("p1", 0.2)});
  EXPECT_DOUBLE_EQ(RebalancePlanner::DecodePressure(s, 2), (5 + 30.0 / 2) / 50);
  EXPECT_DOUBLE_EQ(RebalancePlanner::DecodePressure(s, 1), (5 + 30.0) / 50);
  // Prefill: 1 s of backlog (the local one included) per prefill worker against a 1 s TTFT.
  EXPECT_DOUBLE_EQ(RebalancePlanner::PrefillPressure(s, 2), 0.5);
  EXPECT_DOUBLE_EQ(RebalancePlanner::PrefillPressure(s, 1), 1.0);
  EXPECT_TRUE(std::isinf(RebalancePlanner::PrefillPressure(s, 0)));
}

TEST(RebalancePlannerTest, AShortPrefillRoleTakesTheIdlestDecodeWorkerAfterConfirmation) {
  RebalancePlanner planner(Config());
  // Prefill backlog 2 s against a 1 s TTFT; decode light even on two workers of three.
  const PlannerSnapshot s = Snapshot({Decode("d0", 6, 12), Decode("d1", 1, 7), Decode("d2", 3, 9),
                                      Prefill("p0", 2.0, /*can_switch=*/false)});
  absl::Time now = kStart;
  auto order = LookTimes(planner, s, 3, &now);
  ASSERT_TRUE(order.has_value());
  EXPECT_EQ(order->worker_id, "d1");
  EXPECT_EQ(order->to, WorkerRole::kPrefill);
  EXPECT_TRUE(absl::StrContains(order->reason, "prefill pressure 2.00")) << order->reason;
  planner.Ordered(now);
  // Still short, but the last switch is less than min_between ago.
  EXPECT_FALSE(LookTimes(planner, s, 10, &now).has_value());
  // Once it has passed, the shortage (seen all along) orders at the next look.
  EXPECT_EQ(planner.Look(s, kStart + absl::Seconds(200)).size(), 1u);
}

// Of decode workers alike in load, the one whose streams would end soonest moves: its switch
// waits for them (what has not started is handed back).
TEST(RebalancePlannerTest, AShortPrefillRoleTakesTheDecodeWorkerThatDrainsSoonest) {
  RebalancePlanner planner(Config());
  PlannerWorker long_answers = Decode("d0", 2, 7);
  long_answers.drain_s = 20;
  PlannerWorker ending = Decode("d1", 4, 9);
  ending.drain_s = 0.5;
  PlannerWorker middle = Decode("d2", 3, 8);
  middle.drain_s = 4;
  const PlannerSnapshot s =
      Snapshot({long_answers, ending, middle, Prefill("p0", 2.0, /*can_switch=*/false)});
  absl::Time now = kStart;
  auto order = LookTimes(planner, s, 3, &now);
  ASSERT_TRUE(order.has_value());
  EXPECT_EQ(order->worker_id, "d1");
}

TEST(RebalancePlannerTest, AShortDecodeRoleTakesTheLeastBusyPrefillWorker) {
  RebalancePlanner planner(Config());
  // Decode steps at 60 ms against 50 ms; prefill nearly idle on three workers.
  const PlannerSnapshot s = Snapshot(
      {Decode("d0", 40, 60, false), Prefill("p0", 0.3), Prefill("p1", 0.1), Prefill("p2", 0.2)});
  absl::Time now = kStart;
  auto order = LookTimes(planner, s, 3, &now);
  ASSERT_TRUE(order.has_value());
  EXPECT_EQ(order->worker_id, "p1");
  EXPECT_EQ(order->to, WorkerRole::kDecode);
}

// After a shift of the mix the balance may be several workers away: one order moves as many
// as bring the two roles' pressures nearest (never more than max_moves), the least busy first.
TEST(RebalancePlannerTest, OneOrderMovesWorkersUpToTheBalancePoint) {
  // Decode: 5 ms fixed plus 150 ms of work on one worker against TPOT 50 ms; prefill: 1.5 s of
  // backlog over five workers against TTFT 1 s. Busier role after k moves to decode:
  // k=1 1.6 (decode), k=2 1.1, k=3 0.85 (decode; prefill 0.75), k=4 1.5 (prefill).
  const PlannerSnapshot s =
      Snapshot({Decode("d0", 30, 155, /*can_switch=*/false), Prefill("p4", 0.5), Prefill("p1", 0.2),
                Prefill("p0", 0.1), Prefill("p3", 0.4), Prefill("p2", 0.3)});
  // The orders of a planner allowed `max_moves`, after three looks.
  auto orders_with = [&](int max_moves) {
    RebalanceConfig config = Config();
    config.max_moves = max_moves;
    RebalancePlanner planner(config);
    absl::Time now = kStart;
    return LookTimesAll(planner, s, 3, &now);
  };
  const std::vector<RebalanceOrder> orders = orders_with(5);
  ASSERT_EQ(orders.size(), 3u);
  EXPECT_EQ(orders[0].worker_id, "p0");
  EXPECT_EQ(orders[1].worker_id, "p1");
  EXPECT_EQ(orders[2].worker_id, "p2");
  for (const RebalanceOrder& o : orders) EXPECT_EQ(o.to, WorkerRole::kDecode);
  EXPECT_TRUE(absl::StrContains(orders[0].reason, "0.85 after 3 moves")) << orders[0].reason;
  const std::vector<RebalanceOrder> two = orders_with(2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1].worker_id, "p1");
}

TEST(RebalancePlannerTest, NoSwitchThatEmptiesOrDoesNotHelpOrInterruptsAnother) {
  absl::Time now = kStart;
  {
    // The only decode worker: never moved, however short prefill is.
    RebalancePlanner planner(Config());
    EXPECT_FALSE(
        LookTimes(planner, Snapshot({Decode("d0", 1, 6), Prefill("p0", 5)}), 5, &now).has_value());
  }
  {
    // No prefill worker at all: the planner does not create the role.
    RebalancePlanner planner(Config());
    PlannerWorker local = Decode("d0", 1, 6);
    local.backlog_s = 5;
    EXPECT_FALSE(LookTimes(planner, Snapshot({local, Decode("d1", 1, 6)}), 5, &now).has_value());
  }
  {
    // Decode would be the busier role after the move, and busier than prefill is now.
    RebalancePlanner planner(Config());
    EXPECT_FALSE(LookTimes(planner,
                           Snapshot({Decode("d0", 4, 45), Decode("d1", 4, 45), Prefill("p0", 0.9)}),
                           5, &now)
                     .has_value());
  }
  {
    // An idle cluster (both pressures below `high`) stays as it is.
    RebalancePlanner planner(Config());
    EXPECT_FALSE(LookTimes(planner,
                           Snapshot({Decode("d0", 1, 6), Decode("d1", 1, 6), Prefill("p0", 0.4)}),
                           5, &now)
                     .has_value());
  }
  {
    // Only workers that cannot switch could move.
    RebalancePlanner planner(Config());
    EXPECT_FALSE(LookTimes(planner,
                           Snapshot({Decode("d0", 1, 6, false), Decode("d1", 1, 6, false),
                                     Prefill("p0", 5)}),
                           5, &now)
                     .has_value());
  }
  {
    // A worker draining (a switch in progress) resets the confirmation.
    RebalancePlanner planner(Config());
    const PlannerSnapshot s = Snapshot({Decode("d0", 1, 6), Decode("d1", 1, 6), Prefill("p0", 5)});
    PlannerSnapshot changing = s;
    changing.workers[1].accepting = false;
    EXPECT_FALSE(LookTimes(planner, s, 2, &now).has_value());
    EXPECT_FALSE(LookTimes(planner, changing, 1, &now).has_value());
    EXPECT_FALSE(LookTimes(planner, s, 2, &now).has_value());
    EXPECT_TRUE(LookTimes(planner, s, 1, &now).has_value());
  }
  {
    // A shortage that does not hold for `confirm` looks in a row orders nothing.
    RebalancePlanner planner(Config());
    const PlannerSnapshot short_prefill =
        Snapshot({Decode("d0", 1, 6), Decode("d1", 1, 6), Prefill("p0", 5)});
    const PlannerSnapshot fine =
        Snapshot({Decode("d0", 1, 6), Decode("d1", 1, 6), Prefill("p0", 0.1)});
    for (int i = 0; i < 5; ++i) {
      EXPECT_FALSE(LookTimes(planner, short_prefill, 2, &now).has_value());
      EXPECT_FALSE(LookTimes(planner, fine, 1, &now).has_value());
    }
  }
}

// The snapshot prices a decode worker's decoding streams (not those awaiting offloaded KV,
// which wait on the prefill role) at the cost model's price, and a prefill worker's queue at
// its measured throughput, or at the cost model's price for its prompts when their shape is
// reported; a draining worker does not take work; other models are left out.
TEST(RebalancePlannerTest, TheSnapshotPricesWhatEachRoleHasToDo) {
  const CostModel cost_model{CostModelParams()};
  constexpr uint64_t kFp = 7;
  WorkerEntry decode;
  decode.info = WorkerInfo{.worker_id = "d", .role = WorkerRole::kDecode, .model = "m"};
  decode.info.model_fingerprint = kFp;
  decode.info.role_switching = true;
  decode.reported = true;
  decode.load.running = 2;
  decode.load.awaiting_kv = 2;
  decode.load.context_tokens = 400;
  WorkerEntry prefill;
  prefill.info = WorkerInfo{.worker_id = "p", .role = WorkerRole::kPrefill, .model = "m"};
  prefill.info.model_fingerprint = kFp;
  prefill.reported = true;
  prefill.load.pending_prefill_tokens = 1000;
  prefill.load.prefill_tokens_per_second = 500;
  prefill.load.draining = true;
  WorkerEntry other;
  other.info = WorkerInfo{.worker_id = "o", .role = WorkerRole::kDecode, .model = "other"};
  const std::vector<WorkerEntry*> entries = {&decode, &prefill, &other};
  // Two requests relayed to it: 100 tokens 3 s ago, 400 tokens 1 s ago; its steps take 20 ms.
  decode.measured_step_ms = 20;
  decode.lease_spans[1] = {kStart - absl::Seconds(3), 100};
  decode.lease_spans[2] = {kStart - absl::Seconds(1), 400};
  const PlannerSnapshot s = SnapshotForPlanner(entries, "m", cost_model, {}, kStart);
  ASSERT_EQ(s.workers.size(), 2u);
  const PlannerWorker& d = s.workers[0];
  EXPECT_TRUE(d.can_switch);
  EXPECT_TRUE(d.accepting);
  EXPECT_EQ(d.streams, 4);
  const double base = cost_model.StepMs(kFp, {});
  EXPECT_DOUBLE_EQ(d.base_step_ms, base);
  const double two_streams = cost_model.StepMs(kFp, {.decode = 2, .decode_attention = 200});
  EXPECT_NEAR(d.step_ms, two_streams, 1e-6 * two_streams);
  // The second ends last: 400 x 20 ms = 8 s from its start, 7 s from now (the first, 2 s
  // from its start, could have ended already).
  EXPECT_NEAR(d.drain_s, 7.0, 1e-9);
  const PlannerWorker& p = s.workers[1];
  EXPECT_FALSE(p.accepting);
  EXPECT_FALSE(p.can_switch);
  EXPECT_DOUBLE_EQ(p.backlog_s, 2.0);
  // With the queue's shape reported, both backlogs are priced as the placer prices them: by
  // the cost model for those prompts (two of 500 tokens here), not as one prompt or a rate.
  prefill.load.pending_prefill_token_squares = 2 * 500.0 * 500;
  decode.load.pending_prefill_tokens = 1000;
  decode.load.pending_prefill_token_squares = 2 * 500.0 * 500;
  const PlannerSnapshot shaped = SnapshotForPlanner(entries, "m", cost_model, {}, kStart);
  const double two_prompts_s =
      cost_model.PrefillMs(kFp, PrefillBatchWork{1000, 2 * 500.0 * 500}) / 1000;
  EXPECT_DOUBLE_EQ(shaped.workers[1].backlog_s, two_prompts_s);
  EXPECT_DOUBLE_EQ(shaped.workers[0].backlog_s, two_prompts_s);
  EXPECT_LT(two_prompts_s, cost_model.PrefillMs(kFp, 1000.0) / 1000);  // Not as one prompt.
}

TEST(RebalancePlannerTest, BadSettingsAreRefusedNamingTheFlag) {
  RebalanceConfig c = Config();
  EXPECT_TRUE(c.Validate().ok());
  c.confirm = 0;
  EXPECT_TRUE(absl::StrContains(c.Validate().message(), "--rebalance_confirm"));
  c = Config();
  c.margin = 0.9;
  EXPECT_TRUE(absl::StrContains(c.Validate().message(), "--rebalance_margin"));
  c = Config();
  c.max_moves = 0;
  EXPECT_TRUE(absl::StrContains(c.Validate().message(), "--rebalance_max_moves"));
  c = Config();
  c.interval = absl::ZeroDuration();
  EXPECT_TRUE(absl::StrContains(c.Validate().message(), "--rebalance_interval"));
}

}  // namespace
}  // namespace pdserve::router
