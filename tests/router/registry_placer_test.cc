// The worker registry (validation, replacement, expiry on a fake clock, leases, step samples
// feeding the cost model) and the placer's decode selection (cached prefix, then load, then
// free KV; queue limits; exclusions; prefill candidates of the same geometry only).
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/retry_after.h"
#include "gtest/gtest.h"
#include "kvcache/block_hash.h"
#include "prometheus/registry.h"
#include "router/placer.h"
#include "router/worker_registry.h"
#include "tests/router/registry_fixture.h"

namespace pdserve::router {
namespace {

using testing::CounterSum;
using testing::kFingerprint;
using testing::Listener;
using testing::Load;
using testing::Registration;
using testing::RegistryTest;

TEST_F(RegistryTest, MalformedRegistrationsNameTheField) {
  struct Case {
    std::string field;
    std::function<void(WorkerInfo*)> edit;
  };
  const std::vector<Case> cases = {
      {"worker_id", [](WorkerInfo* r) { r->worker_id.clear(); }},
      {"worker_id", [](WorkerInfo* r) { r->worker_id = std::string(200, 'w'); }},
      {"grpc_address", [](WorkerInfo* r) { r->grpc_address = "nowhere"; }},
      {"model", [](WorkerInfo* r) { r->model.clear(); }},
      {"kv_layout.block_size", [](WorkerInfo* r) { r->kv_layout.block_size = 12; }},
      {"kv_layout.num_blocks", [](WorkerInfo* r) { r->kv_layout.num_blocks = 0; }},
      {"max_num_batched_tokens", [](WorkerInfo* r) { r->max_num_batched_tokens = 0; }},
  };
  for (const Case& c : cases) {
    WorkerInfo r = Registration("d", WorkerRole::kDecode);
    c.edit(&r);
    auto s = registry_.Register(r);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_TRUE(absl::StrContains(s.status().message(), c.field)) << s.status();
  }
  EXPECT_EQ(registry_.size(), 0);
  // Same model name, different weights: refused.
  ASSERT_TRUE(registry_.Register(Registration("a", WorkerRole::kDecode)).ok());
  WorkerInfo other = Registration("b", WorkerRole::kDecode);
  other.model_fingerprint = kFingerprint + 1;
  EXPECT_EQ(registry_.Register(other).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(RegistryTest, SilentWorkersExpireAndTheirRequestsAreTold) {
  auto a = registry_.Register(Registration("a", WorkerRole::kDecode));
  auto b = registry_.Register(Registration("b", WorkerRole::kDecode));
  ASSERT_TRUE(a.ok() && b.ok());
  auto listener = std::make_shared<Listener>();
  const uint64_t key = registry_.Acquire(*a, listener);
  ASSERT_NE(key, 0u);
  for (int i = 0; i < 25; ++i) {  // b reports every 100 ms, a is silent.
    clock_.Advance(absl::Milliseconds(100));
    EXPECT_TRUE(registry_.Report(*b, Load()));
    registry_.ExpireSilent();
  }
  EXPECT_EQ(registry_.size(), 1);
  ASSERT_EQ(listener->reasons.size(), 1u);
  EXPECT_TRUE(absl::StrContains(listener->reasons[0], "no load report")) << listener->reasons[0];
  EXPECT_EQ(listener->whys[0], Interruption::kWorkerLeft);
  EXPECT_FALSE(registry_.Report(*a, Load()));  // Its stream will close.
  EXPECT_EQ(registry_.Acquire(*a, listener), 0u);
  registry_.Release(*a, key);  // Harmless after removal.
}

// The router's readiness follows the registry: told at once when the count of decode workers
// that can take requests changes, and only then.
TEST_F(RegistryTest, ReadyDecodeWorkersAreObservedAsTheyChange) {
  std::vector<int> seen;
  registry_.ObserveReadyDecodeWorkers([&](int ready) { seen.push_back(ready); });
  EXPECT_EQ(seen, std::vector<int>({0}));
  auto prefill = registry_.Register(Registration("p", WorkerRole::kPrefill));
  auto decode = registry_.Register(Registration("d", WorkerRole::kDecode));
  ASSERT_TRUE(prefill.ok() && decode.ok());
  EXPECT_TRUE(registry_.Report(*prefill, Load()));
  EXPECT_EQ(seen, std::vector<int>({0}));  // Registered, not yet reporting; and a prefill.
  EXPECT_TRUE(registry_.Report(*decode, Load()));
  EXPECT_EQ(seen, std::vector<int>({0, 1}));
  EXPECT_TRUE(registry_.Report(*decode, Load(3)));
  EXPECT_EQ(seen, std::vector<int>({0, 1}));  // The same count.
  registry_.Unregister(*decode, "stream closed");
  EXPECT_EQ(seen, std::vector<int>({0, 1, 0}));
  registry_.ObserveReadyDecodeWorkers(nullptr);
  auto again = registry_.Register(Registration("d", WorkerRole::kDecode));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(registry_.Report(*again, Load()));
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(registry_.ReadyDecodeWorkers(), 1);
}

// The router's drain ran out: every running request is told it ends here (not that its
// worker left, which would let the relay place it again), and the workers stay registered.
TEST_F(RegistryTest, InterruptAllEndsEveryRequestAndKeepsTheWorkers) {
  auto a = registry_.Register(Registration("a", WorkerRole::kDecode));
  auto b = registry_.Register(Registration("b", WorkerRole::kDecode));
  ASSERT_TRUE(a.ok() && b.ok());
  auto on_a = std::make_shared<Listener>();
  auto on_b = std::make_shared<Listener>();
  ASSERT_NE(registry_.Acquire(*a, on_a), 0u);
  ASSERT_NE(registry_.Acquire(*b, on_b), 0u);
  EXPECT_EQ(registry_.InterruptAll("stopping"), 2);
  for (const auto& listener : {on_a, on_b}) {
    ASSERT_EQ(listener->whys.size(), 1u);
    EXPECT_EQ(listener->whys[0], Interruption::kRouterStopping);
    EXPECT_EQ(listener->reasons[0], "stopping");
  }
  EXPECT_EQ(registry_.size(), 2);
}

// its workers sent meanwhile are still unread in its sockets. The stall is not their silence:
// nobody is removed, and a worker that stays silent once the router runs expires as usual.
TEST_F(RegistryTest, ARoutersOwnStallIsNotItsWorkersSilence) {
  auto a = registry_.Register(Registration("a", WorkerRole::kDecode));
  auto b = registry_.Register(Registration("b", WorkerRole::kDecode));
  ASSERT_TRUE(a.ok() && b.ok());
  auto listener = std::make_shared<Listener>();
  ASSERT_NE(registry_.Acquire(*a, listener), 0u);
  const absl::Duration interval = absl::Milliseconds(500);  // The sweep period (timeout / 4).
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Milliseconds(100));
    ASSERT_TRUE(registry_.Report(*a, Load()));
    ASSERT_TRUE(registry_.Report(*b, Load()));
  }
  EXPECT_EQ(registry_.ExpireSilent(interval), 0);
  clock_.Advance(absl::Seconds(6));  // Nothing runs: no report read, no sweep.
  EXPECT_EQ(registry_.ExpireSilent(interval), 0);
  EXPECT_EQ(registry_.size(), 2);
  EXPECT_TRUE(listener->reasons.empty());
  // Running again: a's queued reports arrive, b stays silent and expires one timeout later.
  for (int i = 0; i < 25; ++i) {
    clock_.Advance(absl::Milliseconds(100));
    EXPECT_TRUE(registry_.Report(*a, Load()));
    if (i % 5 == 4) registry_.ExpireSilent(interval);
  }
  EXPECT_EQ(registry_.size(), 1);
  EXPECT_TRUE(listener->reasons.empty()) << listener->reasons[0];
  // Without the interval (or with sweeps on time), silence is silence: a expires.
  clock_.Advance(absl::Seconds(3));
  EXPECT_EQ(registry_.ExpireSilent(), 1);
  EXPECT_EQ(listener->reasons.size(), 1u);
}

// A request's TPOT objective counts on its decode worker while it runs: the tightest is what
// the placer hands the policy, and Release takes it back.
TEST_F(RegistryTest, LeasesCarryTheirTpotObjectives) {
  auto a = registry_.Register(Registration("a", WorkerRole::kDecode));
  ASSERT_TRUE(a.ok());
  auto listener = std::make_shared<Listener>();
  const uint64_t loose = registry_.Acquire(*a, listener, 500);
  const uint64_t tight = registry_.Acquire(*a, listener, 40);
  const uint64_t none = registry_.Acquire(*a, listener);
  ASSERT_NE(loose, 0u);
  ASSERT_NE(tight, 0u);
  ASSERT_NE(none, 0u);
  auto objectives = [&] {
    std::vector<double> out;
    registry_.WithLock([&](std::vector<WorkerEntry*>& workers, const PrefixIndex&) {
      out.assign(workers[0]->tpot_objectives.begin(), workers[0]->tpot_objectives.end());
      EXPECT_EQ(workers[0]->in_flight, static_cast<int>(workers[0]->listeners.size()));
    });
    return out;
  };
  EXPECT_EQ(objectives(), (std::vector<double>{40, 500}));
  registry_.Release(*a, tight);
  EXPECT_EQ(objectives(), (std::vector<double>{500}));
  registry_.Release(*a, none);
  registry_.Release(*a, tight);  // Twice: harmless.
  EXPECT_EQ(objectives(), (std::vector<double>{500}));
  registry_.Release(*a, loose);
  EXPECT_TRUE(objectives().empty());
}

// A decode worker's steps with decodes, as reported, make its measured step time (a moving
// average); prefill-only steps do not count, and a report with no stream running clears it.
TEST_F(RegistryTest, ReportedStepsMakeTheMeasuredStepTime) {
  auto a = registry_.Register(Registration("a", WorkerRole::kDecode));
  ASSERT_TRUE(a.ok());
  auto measured = [&] {
    double ms = -1;
    registry_.WithLock([&](std::vector<WorkerEntry*>& workers, const PrefixIndex&) {
      ms = workers[0]->measured_step_ms;
    });
    return ms;
  };
  WorkerReport r = Load(4);
  r.steps.push_back({.num_decode = 4, .duration_ms = 20});
  ASSERT_TRUE(registry_.Report(*a, r));
  EXPECT_DOUBLE_EQ(measured(), 20);  // The first step sets it.
  r.steps = {{.num_decode = 4, .num_prefill_tokens = 100, .duration_ms = 40},
             {.num_decode = 0, .num_prefill_tokens = 500, .duration_ms = 400}};
  ASSERT_TRUE(registry_.Report(*a, r));
  EXPECT_DOUBLE_EQ(measured(), 0.95 * 20 + 0.05 * 40);
  r.steps.clear();
  ASSERT_TRUE(registry_.Report(*a, Load(0)));
  EXPECT_EQ(measured(), 0);
}

// Leases count their streams by the tokens they may generate (the cost model's short
// streams), and Release takes each back.
TEST_F(RegistryTest, LeasesCountTheirStreamsByLength) {
  auto a = registry_.Register(Registration("a", WorkerRole::kDecode));
  ASSERT_TRUE(a.ok());
  auto listener = std::make_shared<Listener>();
  const uint64_t tiny = registry_.Acquire(*a, listener, 25, 8);
  const uint64_t chat = registry_.Acquire(*a, listener, 0, 1000);
  const uint64_t unknown = registry_.Acquire(*a, listener);
  ASSERT_NE(tiny, 0u);
  auto lengths = [&] {
    StreamLengths out;
    registry_.WithLock([&](std::vector<WorkerEntry*>& workers, const PrefixIndex&) {
      out = workers[0]->streams_by_length;
    });
    return out;
  };
  StreamLengths expected;
  expected.count[3] = 1;  // 8 tokens, TPOT objective 25 ms.
  expected.with_objective[3] = 1;
  expected.inverse_tpot_ms[3] = 1.0 / 25;
  expected.count[9] = 1;  // 1000 tokens, no objective.
  EXPECT_EQ(lengths(), expected);
  registry_.Release(*a, tiny);
  expected.count[3] = 0;
  expected.with_objective[3] = 0;
  expected.inverse_tpot_ms[3] = 0;
  EXPECT_EQ(lengths(), expected);
  registry_.Release(*a, chat);
  registry_.Release(*a, unknown);
  registry_.Release(*a, chat);  // Twice: harmless.
  EXPECT_EQ(lengths(), StreamLengths{});
}

// A restarted worker (new epoch) whose predecessor went silent replaces it; until then the
// id is taken. The same process reconnecting (same epoch) replaces its old session at once.
TEST_F(RegistryTest, ARestartedWorkerReplacesItsSilentPredecessor) {
  auto first = registry_.Register(Registration("a", WorkerRole::kDecode));
  ASSERT_TRUE(first.ok());
  auto listener = std::make_shared<Listener>();
  ASSERT_NE(registry_.Acquire(*first, listener), 0u);
  WorkerInfo again = Registration("a", WorkerRole::kDecode);
  again.epoch = 2;
  EXPECT_EQ(registry_.Register(again).status().code(), absl::StatusCode::kAlreadyExists);
  clock_.Advance(absl::Seconds(3));  // Past the 2 s report timeout: the old one is dead.
  auto second = registry_.Register(again);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(registry_.size(), 1);
  ASSERT_EQ(listener->reasons.size(), 1u);
  EXPECT_TRUE(absl::StrContains(listener->reasons[0], "registered again")) << listener->reasons[0];
  EXPECT_FALSE(registry_.Report(*first, Load()));
  EXPECT_TRUE(registry_.Report(*second, Load()));
  // The old stream's close does not remove the new registration.
  registry_.Unregister(*first, "old stream closed");
  EXPECT_EQ(registry_.size(), 1);
  // The same process reconnecting (its stream broke) replaces its session without waiting.
  auto reconnected = registry_.Register(again);
  ASSERT_TRUE(reconnected.ok()) << reconnected.status();
  EXPECT_FALSE(registry_.Report(*second, Load()));
  registry_.Unregister(*reconnected, "stream closed");
  EXPECT_EQ(registry_.size(), 0);
}

// Two live processes configured with one id: the second is refused with a clear error and
// the first keeps its registration and its requests (they used to evict each other forever).
TEST_F(RegistryTest, ASecondLiveWorkerWithATakenIdIsRefused) {
  auto first = registry_.Register(Registration("a", WorkerRole::kDecode));
  ASSERT_TRUE(first.ok());
  auto listener = std::make_shared<Listener>();
  ASSERT_NE(registry_.Acquire(*first, listener), 0u);
  WorkerInfo impostor = Registration("a", WorkerRole::kDecode);
  impostor.epoch = 99;
  impostor.grpc_address = "127.0.0.1:7777";
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(registry_.Report(*first, Load()));  // The first keeps reporting.
    const auto refused = registry_.Register(impostor);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
    EXPECT_TRUE(absl::StrContains(refused.status().message(), "registration.worker_id: 'a'"))
        << refused.status();
    EXPECT_TRUE(absl::StrContains(refused.status().message(), "--worker_id")) << refused.status();
  }
  EXPECT_TRUE(listener->reasons.empty());
  EXPECT_EQ(registry_.size(), 1);
}

TEST_F(RegistryTest, StepSamplesTrainTheCostModel) {
  auto a = registry_.Register(Registration("a", WorkerRole::kDecode));
  ASSERT_TRUE(a.ok());
  const StepWork decode_step{.decode = 4, .decode_attention = 4000};
  const double before = cost_model_.StepMs(kFingerprint, decode_step);
  // Chunks after cached prefixes of varying length: their attention costs 1e-4 ms per
  // position, which the registry must report apart from the decodes' (free here).
  for (int r = 0; r < 40; ++r) {
    WorkerReport load = Load(3);
    for (int i = 0; i < 10; ++i) {
      const int d = 1 + (r + i) % 8;
      const int p = (r + i) % 3 == 0 ? 128 : 0;
      const int64_t chunk_attention = p * int64_t{(r * 37 + i * 101) % 2048} + p * (p + 1) / 2;
      load.steps.push_back(
          StepObservation{.num_decode = d,
                          .num_prefill_tokens = p,
                          .context_tokens = int64_t{d} * 1000 + chunk_attention,
                          .prefill_context_tokens = chunk_attention,
                          .duration_ms = 1.0 + 0.5 * d + 0.01 * p + 1e-4 * chunk_attention});
    }
    ASSERT_TRUE(registry_.Report(*a, load));
  }
  const double after = cost_model_.StepMs(kFingerprint, decode_step);
  EXPECT_NE(before, after);
  EXPECT_NEAR(after, 1.0 + 0.5 * 4, 0.3);
  const StepWork chunk = StepWork::Chunk(128, 1024);
  EXPECT_NEAR(cost_model_.StepMs(kFingerprint, chunk) - cost_model_.StepMs(kFingerprint, {}),
              0.01 * 128 + 1e-4 * chunk.prefill_attention, 2.0);
  // The status shows the latest load.
  const std::vector<WorkerStatus> status = registry_.Status();
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].load.running, 3);
}

class PlacerTest : public RegistryTest {
 protected:
  PlacerTest() : log_(100) {
    model_.name = "m";
    policy_ = *MakePlacementPolicy(PolicyConfig());
    PlacerConfig config;
    config.max_waiting_per_worker = 4;
    placer_ =
        std::make_unique<Placer>(&registry_, &cost_model_, policy_.get(), config, &metrics_, &log_);
  }
  uint64_t Add(const std::string& id, WorkerRole role, WorkerReport load = WorkerReport()) {
    auto s = registry_.Register(Registration(id, role));
    EXPECT_TRUE(s.ok()) << s.status();
    if (load.load.free_blocks == 0) load.load.free_blocks = 900;
    registry_.Report(*s, load);
    return *s;
  }
  absl::StatusOr<PlacementResult> Place(const std::vector<int32_t>& prompt,
                                        std::vector<std::string> exclude = {},
                                        std::optional<SloConfig> slo = std::nullopt) {
    PlacementRequest r;
    r.request_id = "req";
    r.model = &model_;
    r.prompt = &prompt;
    r.max_tokens = 16;
    r.exclude = std::move(exclude);
    r.slo = slo;
    return placer_->Place(r);
  }
  // `session`'s worker reports caching the first `tokens` of `prompt` (16-token blocks).
  bool CachePrefix(uint64_t session, const std::vector<int32_t>& prompt, size_t tokens) {
    PrefixCacheUpdate events;
    events.stored =
        kvcache::FullBlockHashes(kFingerprint, absl::MakeConstSpan(prompt).subspan(0, tokens), 16);
    return registry_.ApplyPrefix(session, events);
  }
  static std::vector<int32_t> Prompt(int n, int salt = 0) {
    std::vector<int32_t> p(n);
    for (int i = 0; i < n; ++i) p[i] = (i * 31 + salt) % 1000;
    return p;
  }

  CatalogModel model_;
  DecisionLog log_;
  std::unique_ptr<PlacementPolicy> policy_;
  std::unique_ptr<Placer> placer_;
};

TEST_F(PlacerTest, LongestCachedPrefixWinsThenLoadThenFreeBlocks) {
  const uint64_t a = Add("a", WorkerRole::kDecode, Load(5));
  Add("b", WorkerRole::kDecode);
  const std::vector<int32_t> prompt = Prompt(100);
  // Equal (no) prefix: the less loaded b.
  auto placed = Place(prompt);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->placement.decode.worker_id, "b");
  EXPECT_EQ(placed->placement.uncached_tokens, 100);
  // a caches the first 3 blocks: it wins despite its load.
  ASSERT_TRUE(CachePrefix(a, prompt, 48));
  placed = Place(prompt);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->placement.decode.worker_id, "a");
  EXPECT_EQ(placed->placement.uncached_tokens, 52);
  EXPECT_EQ(placed->placement.running_decodes, 5);
  // Unless it is excluded (a retry after it failed).
  placed = Place(prompt, {"a"});
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->placement.decode.worker_id, "b");
  // Every decision is logged, newest first.
  const auto recent = log_.Recent(10);
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent[0].placement.decode.worker_id, "b");
  EXPECT_EQ(recent[1].placement.decode.worker_id, "a");
}

// Prefix affinity yields when it has piled requests on one worker (the busiest has more than
// balance_abs = 8 over the idlest, and 1.5x as many), and a worker whose free blocks cannot
// hold the uncached prompt is chosen last, whatever it caches.
TEST_F(PlacerTest, PrefixAffinityYieldsToImbalanceAndToFullPools) {
  const uint64_t a = Add("a", WorkerRole::kDecode, Load(9));
  const uint64_t b = Add("b", WorkerRole::kDecode, Load(1));
  const std::vector<int32_t> prompt = Prompt(100);
  ASSERT_TRUE(CachePrefix(a, prompt, 48));
  // 9 vs 1: within balance_abs, so the cached prefix wins.
  auto placed = Place(prompt);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->placement.decode.worker_id, "a");
  // a's count now includes that dispatch: 10 vs 1 is over both thresholds, so load wins.
  placed = Place(prompt);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->placement.decode.worker_id, "b");
  EXPECT_EQ(placed->placement.uncached_tokens, 100);
  // Balanced again, but a's pool has 3 free blocks for the 4 the uncached suffix needs
  // (52 tokens + 1): b, which has room, goes first.
  ASSERT_TRUE(registry_.Report(a, Load(1, 3)));
  ASSERT_TRUE(registry_.Report(b, Load(1, 900)));
  placed = Place(prompt);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->placement.decode.worker_id, "b");
  // With 4 free it fits, and its prefix wins.
  ASSERT_TRUE(registry_.Report(a, Load(1, 4)));
  ASSERT_TRUE(registry_.Report(b, Load(1, 900)));
  placed = Place(prompt);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->placement.decode.worker_id, "a");
}

// The objectives of the requests running on a decode worker reach the policy: a 1 ms TPOT
// stream there makes any local prefill break it, so a long prompt goes to the prefill worker
// for that reason, and only while that stream runs.
TEST_F(PlacerTest, RunningStreamsObjectivesReachThePolicy) {
  const uint64_t a = Add("a", WorkerRole::kDecode, Load(1, 900));
  Add("p", WorkerRole::kPrefill);
  const std::vector<int32_t> prompt = Prompt(300);
  auto placed = Place(prompt);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_NE(placed->placement.reason, "local_exceeds_tpot_slo");
  auto listener = std::make_shared<Listener>();
  const uint64_t lease = registry_.Acquire(a, listener, /*tpot_objective_ms=*/1);
  ASSERT_NE(lease, 0u);
  EXPECT_TRUE(registry_.Report(a, Load(1, 900)));  // The leased stream is the one running.
  placed = Place(Prompt(300, 1));
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_TRUE(placed->placement.offload);
  EXPECT_EQ(placed->placement.reason, "local_exceeds_tpot_slo");
  registry_.Release(a, lease);
  EXPECT_TRUE(registry_.Report(a, Load(1, 900)));
  placed = Place(Prompt(300, 2));
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_NE(placed->placement.reason, "local_exceeds_tpot_slo");
}

TEST_F(PlacerTest, QueueLimitsGiveResourceExhaustedWithARetryHint) {
  Add("a", WorkerRole::kDecode);
  // The limit counts requests dispatched since the last report too.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Place(Prompt(10, i)).ok());
  auto full = Place(Prompt(10));
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RetryAfter(full.status()), absl::Milliseconds(200)) << full.status();
}

// No worker now is worth retrying (UNAVAILABLE); a request bigger than every worker is not
// (INVALID_ARGUMENT: a retry would fail the same way).
TEST_F(PlacerTest, NoWorkerIsUnavailableButTooBigForEveryWorkerIsInvalid) {
  EXPECT_EQ(Place(Prompt(10)).status().code(), absl::StatusCode::kUnavailable);
  Add("a", WorkerRole::kDecode);
  auto too_long = Place(Prompt(4090));  // Plus max_tokens exceeds the worker's context.
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument) << too_long.status();
  EXPECT_TRUE(absl::StrContains(too_long.status().message(), "prompt: 4090 tokens"))
      << too_long.status();
  EXPECT_TRUE(absl::StrContains(too_long.status().message(), "at most")) << too_long.status();
  // Able to hold it, but already tried.
  EXPECT_EQ(Place(Prompt(10), {"a"}).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(PlacerTest, OnlyPrefillWorkersOfTheSameGeometryAreCandidates) {
  Add("d", WorkerRole::kDecode, Load(40));
  WorkerInfo other = Registration("p-f16", WorkerRole::kPrefill);
  other.kv_layout.dtype = DType::kF16;
  const uint64_t f16 = *registry_.Register(other);
  registry_.Report(f16, Load());
  Add("p", WorkerRole::kPrefill);
  auto placed = Place(Prompt(3000));
  ASSERT_TRUE(placed.ok());
  ASSERT_TRUE(placed->placement.offload) << placed->placement.reason;
  ASSERT_EQ(placed->placement.prefill.size(), 1u);
  EXPECT_EQ(placed->placement.prefill[0].worker_id, "p");
  EXPECT_EQ(placed->placement.prefill[0].address,
            Registration("p", WorkerRole::kPrefill).grpc_address);
  EXPECT_GT(placed->decision_us, 0);
}

// Each offload counts as an arrival at its primary prefill worker: the next decision prices
// the delay its own prefill would add to the offloads queueing there.
TEST_F(PlacerTest, OffloadsCountAsArrivalsAtTheirPrefillWorker) {
  Add("d", WorkerRole::kDecode, Load(40));
  Add("p", WorkerRole::kPrefill);
  // A TTFT objective no offload meets, so that the delay to the offloads queueing behind counts
  // whole (the policy counts only what pushes them past their objective).
  const SloConfig tight{.ttft_ms = 1, .tpot_ms = 200};
  auto first = Place(Prompt(600), {}, tight);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->placement.offload) << first->placement.reason;
  auto second = Place(Prompt(600, 1), {}, tight);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(second->placement.offload) << second->placement.reason;
  // Same prompt length, so the same transfer tail: what grew is the queueing term.
  EXPECT_GT(second->placement.predicted_offload_cost_ms,
            first->placement.predicted_offload_cost_ms + 1e-3);
}

// A prompt kept local joins its worker's backlog until the worker's next report says what
// is there: the next prompt placed on it before that report is predicted to wait behind it
// (a clump of requests arriving together was otherwise judged against the last report).
TEST_F(PlacerTest, ALocalPrefillQueuesAheadOfTheNextUntilTheWorkersReport) {
  const uint64_t d = Add("d", WorkerRole::kDecode);  // No prefill worker: every prompt local.
  auto first = Place(Prompt(2000));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_FALSE(first->placement.offload);
  auto second = Place(Prompt(2000, 1));
  ASSERT_TRUE(second.ok()) << second.status();
  // Its own prefill after the first's: about twice the first's wait.
  EXPECT_GT(second->placement.predicted_ttft_local_ms,
            1.8 * first->placement.predicted_ttft_local_ms);
  bool found = false;
  registry_.WithLock([&](std::vector<WorkerEntry*>& workers, const PrefixIndex&) {
    for (const WorkerEntry* e : workers) {
      if (e->info.worker_id != "d") continue;
      found = true;
      EXPECT_EQ(e->load.pending_prefill_tokens, 4000);
      EXPECT_DOUBLE_EQ(e->load.pending_prefill_token_squares, 2 * 2000.0 * 2000);
    }
  });
  EXPECT_TRUE(found);
  // The worker's report replaces the router's count: an empty backlog, as at first.
  registry_.Report(d, Load(0, 900));
  auto third = Place(Prompt(2000, 2));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_NEAR(third->placement.predicted_ttft_local_ms, first->placement.predicted_ttft_local_ms,
              1e-6);
}

// A decode worker's load is the step time its requests predict, not their count: with an
// H100-like price (0.05 ms a stream, 4e-5 ms a KV position attended to), 4 streams of 12k
// tokens (2.12 ms) are more work than 8 of 500 (0.56 ms). Each dispatch adds its prompt to
// the worker it went to until the next report, so 4000-token prompts go to the light worker
// until it has become the heavier: after 8 (0.56 + 8 x 0.21 = 2.24 ms); then one to the
// other (2.12 + 0.21 = 2.33 ms), and back.
TEST_F(PlacerTest, LoadIsTheDecodeStepTimeTheRequestsPredict) {
  CostModelParams params;
  params.step_per_decode_ms = 0.05;
  params.step_per_attention_ms = 4e-5;
  const CostModel priced(params);
  PlacerConfig config;
  config.max_waiting_per_worker = 256;
  config.decode_balance = DecodeBalance::kWork;
  Placer placer(&registry_, &priced, policy_.get(), config, &metrics_, &log_);
  WorkerReport long_streams = Load(4, 900);
  long_streams.load.context_tokens = 4 * 12000;
  WorkerReport short_streams = Load(8, 900);
  short_streams.load.context_tokens = 8 * 500;
  Add("long", WorkerRole::kDecode, long_streams);
  Add("short", WorkerRole::kDecode, short_streams);
  std::vector<std::string> chosen;
  for (int i = 0; i < 10; ++i) {
    const std::vector<int32_t> prompt = Prompt(4000, i);
    PlacementRequest r{
        .request_id = absl::StrCat("r", i), .model = &model_, .prompt = &prompt, .max_tokens = 16};
    auto placed = placer.Place(r);
    ASSERT_TRUE(placed.ok()) << placed.status();
    chosen.push_back(placed->placement.decode.worker_id);
  }
  const std::vector<std::string> expected = {"short", "short", "short", "short", "short",
                                             "short", "short", "short", "long",  "short"};
  EXPECT_EQ(chosen, expected);
  // --decode_balance=streams: the fewer streams win (long: 5 with the one above, short: 12).
  config.decode_balance = DecodeBalance::kStreams;
  Placer by_streams(&registry_, &priced, policy_.get(), config, &metrics_, &log_);
  const std::vector<int32_t> next = Prompt(4000, 50);
  auto counted = by_streams.Place(PlacementRequest{
      .request_id = "streams", .model = &model_, .prompt = &next, .max_tokens = 16});
  ASSERT_TRUE(counted.ok()) << counted.status();
  EXPECT_EQ(counted->placement.decode.worker_id, "long");
  // Without context reported or attention measured, work is the stream count.
  Add("few", WorkerRole::kDecode, Load(4, 900));
  Add("many", WorkerRole::kDecode, Load(8, 900));
  const std::vector<int32_t> prompt = Prompt(100, 99);
  auto placed = placer.Place(PlacementRequest{.request_id = "counts",
                                              .model = &model_,
                                              .prompt = &prompt,
                                              .max_tokens = 16,
                                              .exclude = {"long", "short"}});
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->placement.decode.worker_id, "few");
}

TEST(DecodeBalanceTest, ParsesItsTwoNamesAndNamesTheFlagOtherwise) {
  EXPECT_EQ(*ParseDecodeBalance("work", "--decode_balance"), DecodeBalance::kWork);
  EXPECT_EQ(*ParseDecodeBalance("streams", "--decode_balance"), DecodeBalance::kStreams);
  const auto bad = ParseDecodeBalance("tokens", "--decode_balance");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "--decode_balance"));
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "tokens"));
}

// Each request counts on its decode worker by its uncached length: the cost model's view
// of which prompts the worker takes (PlacementPolicyTest.HeadroomAndLengthMixJudgeTheMeanTpot).
TEST_F(PlacerTest, ArrivalsCountByUncachedLength) {
  const uint64_t d = Add("d", WorkerRole::kDecode, Load(40));
  ASSERT_TRUE(Place(Prompt(100)).ok());
  ASSERT_TRUE(Place(Prompt(600, 1)).ok());
  // A 1092-token prompt whose first 992 tokens (62 blocks) the worker caches counts as 100.
  const std::vector<int32_t> warm = Prompt(1092, 2);
  ASSERT_TRUE(CachePrefix(d, warm, 992));
  auto placed = Place(warm);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->placement.uncached_tokens, 100);
  ASSERT_TRUE(Place(Prompt(600, 3)).ok());
  std::vector<LengthClassRate> classes;
  registry_.WithLock([&](std::vector<WorkerEntry*>& workers, const PrefixIndex&) {
    ASSERT_EQ(workers.size(), 1u);
    classes = workers[0]->arrivals.Classes(registry_.clock()->Now());
  });
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_NEAR(classes[0].mean_tokens, 100, 1e-9);
  EXPECT_NEAR(classes[1].mean_tokens, 600, 1e-9);
  EXPECT_NEAR(classes[0].per_s, classes[1].per_s, 1e-9);  // Two of each.
}

}  // namespace
}  // namespace pdserve::router
