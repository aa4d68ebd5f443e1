#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <queue>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "decode_worker/offload_coordinator.h"
#include "prometheus/registry.h"
#include "router/cost_model.h"
#include "router/decision_log.h"
#include "router/learning.h"
#include "router/model_catalog.h"
#include "router/rebalance_planner.h"
#include "router/router_metrics.h"
#include "router/worker_registry.h"
#include "sim/sim_decode_worker.h"
#include "sim/sim_prefill_worker.h"

namespace pdserve::sim {
namespace {

constexpr uint64_t kFingerprint = 0x5151'2026'0000'0001ULL;
constexpr char kModelName[] = "sim";

enum class EventKind : uint8_t {
  kSend,           // The client sends request `a` (to the router).
  kAtDecode,       // Request `a` reaches its decode worker.
  kStepDone,       // Decode worker `a`'s step ends.
  kAtPrefill,      // Request `a`'s prefill job reaches prefill worker `b`.
  kBatchDone,      // Prefill worker `a`'s batch ended (its last transfer landed).
  kKvArrived,      // Request `a`'s prefill answer reaches its decode worker.
  kDecodeReport,   // Decode worker `a` reports to the router.
  kPrefillReport,  // Prefill worker `a` reports.
  kRebalance,      // The router's rebalancing planner looks (with rebalancing).
  kSwitchDone,     // Worker `a`, drained, registers in its new role.
  kPlaceAgain,     // Request `a`, handed back by a decode worker, reaches the router again.
};

struct Event {
  double ms = 0;
  uint64_t order = 0;  // Ties: first scheduled, first run (determinism).
  EventKind kind = EventKind::kSend;
  int a = 0;
  int b = 0;
  bool operator>(const Event& o) const { return ms != o.ms ? ms > o.ms : order > o.order; }
};

class NoopListener final : public router::WorkerListener {
 public:
  void Interrupted(router::Interruption, const std::string&) override {
  }  // Simulated workers never leave.
};

struct RequestState {
  std::vector<int32_t> prompt;  // As sent (a follow-up's includes its earlier turn).
  double sent_ms = -1;
  int decode = -1;
  uint64_t session = 0;
  uint64_t lease = 0;
  bool offload = false;
  std::vector<int> prefill;  // Prefill workers the placement named (primary first).
  decode::Sequence* seq = nullptr;
  double first_ms = -1;
  double last_ms = -1;
  int tokens = 0;
  SimPrefillDone prefill_done;
  router::PlacementForLearning learning;  // What the router learns with (its placement's).
  std::vector<int> followers;             // Follow-ups waiting for this turn to end.
  // Handed back (or refused) by draining decode workers: how often, and those workers, which
  // its next placement excludes (the relay's rule).
  int handed_back = 0;
  std::vector<std::string> exclude;
  bool job_in_flight = false;  // Its prefill job is on its way to the prefill worker...
  bool job_withdrawn = false;  // ...and is dropped there: the request was handed back.
};

// What arrives at a decode worker while its step runs waits for the step's end, as the real
// engine loop takes its inbox between steps.
struct DecodeInbox {
  std::vector<int> arrivals;  // Requests to submit.
  std::vector<int> kv;        // Requests whose offloaded KV arrived.
};

class Simulation;

// The registry's way back to simulated worker `slot` (with rebalancing).
class SlotControl final : public router::WorkerControl {
 public:
  SlotControl(Simulation* sim, int slot) : sim_(sim), slot_(slot) {}
  void SwitchRole(router::WorkerRole role, const std::string& reason) override;

 private:
  Simulation* sim_;
  int slot_;
};

class Simulation {
 public:
  Simulation(const SimConfig& config, const std::vector<SimRequest>& requests)
      : config_(config),
        requests_(requests),
        metrics_(prometheus_),
        cost_model_(config.router_prior.value_or(config.profile.timing)),
        registry_(&clock_, absl::Hours(24 * 365), &cost_model_, &metrics_),
        log_(1),
        rng_(config.seed) {}

  absl::StatusOr<SimResult> Run();
  // The registry ordered worker `slot` to change role: it takes no new work from now on.
  void OrderSwitch(int slot, router::WorkerRole to);

 private:
  void Schedule(double ms, EventKind kind, int a, int b = 0) {
    queue_.push(Event{.ms = ms, .order = next_order_++, .kind = kind, .a = a, .b = b});
  }
  absl::Status Start();
  void Send(int r);
  void Place(int r);  // Send's placement (again, after a hand-back).
  void AtDecode(int r);
  void Submit(int r);  // At its decode worker, between steps.
  // Its offload admitted AWAITING_KV with `cached` prompt tokens from the prefix cache: the
  // prefill job is sent.
  void StartTransfer(int r, int cached);
  void KvArrived(int r);
  void TakeKv(int r);  // Between steps.
  void MaybeStep(int w);
  void StepDone(int w);
  void MaybeBatch(int p);
  void BatchDone(int p);
  void HandleEmissions(const std::vector<Emission>& emissions);
  void Finish(int r, const std::string& error);
  double StepMs(const StepObservation& s);
  // With rebalancing: worker `w` takes work as a decode (prefill) worker now.
  bool DecodeActive(int w) const { return !switching_ || role_[w] == router::WorkerRole::kDecode; }
  bool PrefillActive(int p) const {
    return !switching_ || role_[p] == router::WorkerRole::kPrefill;
  }
  router::WorkerInfo InfoOf(router::WorkerRole role, int index) const;
  void Rebalance();
  // Worker `slot` holds nothing in its current role.
  bool SlotEmpty(int slot) const {
    return role_[slot] == router::WorkerRole::kDecode ? decode_[slot]->empty()
                                                      : prefill_[slot]->idle();
  }
  // A draining worker that holds nothing more goes on to its new role.
  void MaybeFinishSwitch(int slot);
  void SwitchDone(int slot);
  // A decode worker draining for a switch takes nothing new and, between steps, hands back to
  // the router every request that has given its client nothing and whose KV nobody is writing
  // (decode::EngineLoop::BeginDrainHandingBack, the product's rule): it is placed again elsewhere,
  // and the worker drains only what has started.
  bool HandingBack(int w) const {
    return switching_ && draining_[w] && role_[w] == router::WorkerRole::kDecode;
  }
  void HandBackUnstarted(int w);
  void HandBack(int r);

  const SimConfig& config_;
  const std::vector<SimRequest>& requests_;
  FakeClock clock_;
  absl::Time epoch_;
  prometheus::Registry prometheus_;
  router::RouterMetrics metrics_;
  router::CostModel cost_model_;
  router::WorkerRegistry registry_;
  router::DecisionLog log_;
  std::unique_ptr<router::PlacementPolicy> policy_;
  std::unique_ptr<router::Placer> placer_;
  router::CatalogModel model_;
  std::shared_ptr<NoopListener> listener_ = std::make_shared<NoopListener>();
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_;

  std::vector<std::unique_ptr<SimDecodeWorker>> decode_;
  std::vector<uint64_t> decode_session_;
  std::vector<DecodeInbox> inbox_;
  std::vector<double> step_ms_;  // The running step's duration, per decode worker.
  std::vector<std::unique_ptr<SimPrefillWorker>> prefill_;
  std::vector<uint64_t> prefill_session_;
  absl::flat_hash_map<std::string, int> worker_index_;  // Worker id -> decode or prefill index.
  // With rebalancing: every worker (slot) has both roles' parts, indexed alike, one active.
  bool switching_ = false;
  std::vector<router::WorkerRole> role_;
  std::vector<bool> draining_;
  std::vector<bool> finishing_;  // Drained; its registration in the new role is on its way.
  std::vector<router::WorkerRole> switch_to_;
  std::vector<std::shared_ptr<SlotControl>> controls_;
  std::optional<router::RebalancePlanner> planner_;

  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  uint64_t next_order_ = 0;
  double now_ms_ = 0;
  std::vector<RequestState> state_;
  SimResult result_;
  size_t finished_ = 0;
  std::vector<Emission> emissions_;  // Scratch.
};

router::WorkerInfo Simulation::InfoOf(router::WorkerRole role, int index) const {
  const WorkerShape& shape = config_.profile.shape;
  router::WorkerInfo info;
  const bool decode = role == router::WorkerRole::kDecode;
  info.worker_id = switching_ ? absl::StrCat("worker-", index)
                              : absl::StrCat(decode ? "decode-" : "prefill-", index);
  info.role = role;
  info.grpc_address = absl::StrCat("127.0.0.1:", (switching_ ? 40000
                                                  : decode   ? 20000
                                                             : 30000) +
                                                     index);
  info.model = kModelName;
  info.model_fingerprint = kFingerprint;
  info.kv_layout = shape.kv_layout;
  if (!decode && shape.prefill_kv_blocks > 0) info.kv_layout.num_blocks = shape.prefill_kv_blocks;
  info.epoch = 1;
  info.max_num_batched_tokens = shape.max_num_batched_tokens;
  info.max_num_seqs = shape.max_num_seqs;
  info.max_context_tokens = shape.max_context_tokens;
  info.vocab_size = shape.vocab_size;
  info.role_switching = switching_;
  return info;
}

absl::Status Simulation::Start() {
  const WorkerShape& shape = config_.profile.shape;
  router::PolicyConfig policy = config_.policy;
  ASSIGN_OR_RETURN(policy_, router::MakePlacementPolicy(policy));
  placer_ = std::make_unique<router::Placer>(&registry_, &cost_model_, policy_.get(),
                                             config_.placer, &metrics_, &log_);
  model_.name = kModelName;
  epoch_ = clock_.Now();
  const LinkModel link{.bytes_per_ms = config_.profile.timing.transfer_bytes_per_ms,
                       .latency_ms = config_.profile.timing.transfer_latency_ms,
                       .layerwise = config_.layerwise};
  if (config_.rebalance.has_value()) {
    // Every worker holds both roles; the first decode_workers start as decode workers.
    switching_ = true;
    planner_.emplace(*config_.rebalance);
    const int n = config_.decode_workers + config_.prefill_workers;
    for (int i = 0; i < n; ++i) {
      const router::WorkerRole role =
          i < config_.decode_workers ? router::WorkerRole::kDecode : router::WorkerRole::kPrefill;
      role_.push_back(role);
      controls_.push_back(std::make_shared<SlotControl>(this, i));
      const router::WorkerInfo info = InfoOf(role, i);
      ASSIGN_OR_RETURN(const uint64_t session, registry_.Register(info, controls_.back()));
      decode_.push_back(std::make_unique<SimDecodeWorker>(shape, kFingerprint));
      prefill_.push_back(std::make_unique<SimPrefillWorker>(shape, config_.profile.timing, link));
      const bool decode = role == router::WorkerRole::kDecode;
      decode_session_.push_back(decode ? session : 0);
      prefill_session_.push_back(decode ? 0 : session);
      worker_index_[info.worker_id] = i;
      if (decode) {
        registry_.Report(session, decode_.back()->TakeReport());
      } else {
        registry_.Report(session, WorkerReport{.load = prefill_.back()->Load(), .steps = {}});
      }
      Schedule(config_.report_interval_ms * (i + 1.0) / n, EventKind::kDecodeReport, i);
      Schedule(config_.report_interval_ms * (i + 1.0) / n, EventKind::kPrefillReport, i);
    }
    draining_.assign(n, false);
    finishing_.assign(n, false);
    switch_to_.assign(n, router::WorkerRole::kDecode);
    inbox_.resize(decode_.size());
    Schedule(absl::ToDoubleMilliseconds(config_.rebalance->interval), EventKind::kRebalance, 0);
  } else {
    for (int i = 0; i < config_.decode_workers; ++i) {
      const router::WorkerInfo info = InfoOf(router::WorkerRole::kDecode, i);
      ASSIGN_OR_RETURN(const uint64_t session, registry_.Register(info));
      decode_.push_back(std::make_unique<SimDecodeWorker>(shape, kFingerprint));
      decode_session_.push_back(session);
      worker_index_[info.worker_id] = i;
      // Reports are spread over the interval, as unsynchronised processes' would be; the
      // first one comes at once so that the router can place from the start.
      registry_.Report(session, decode_.back()->TakeReport());
      Schedule(config_.report_interval_ms * (i + 1.0) / config_.decode_workers,
               EventKind::kDecodeReport, i);
    }
    inbox_.resize(decode_.size());
    for (int i = 0; i < config_.prefill_workers; ++i) {
      const router::WorkerInfo info = InfoOf(router::WorkerRole::kPrefill, i);
      ASSIGN_OR_RETURN(const uint64_t session, registry_.Register(info));
      prefill_.push_back(std::make_unique<SimPrefillWorker>(shape, config_.profile.timing, link));
      prefill_session_.push_back(session);
      worker_index_[info.worker_id] = i;
      registry_.Report(session, WorkerReport{.load = prefill_.back()->Load(), .steps = {}});
      Schedule(config_.report_interval_ms * (i + 0.5) / config_.prefill_workers,
               EventKind::kPrefillReport, i);
    }
  }
  state_.resize(requests_.size());
  result_.requests.resize(requests_.size());
  for (size_t r = 0; r < requests_.size(); ++r) {
    const SimRequest& q = requests_[r];
    SimRequestResult& out = result_.requests[r];
    out.kind = q.kind;
    out.slo = q.slo;
    out.slo_class = q.slo_class;
    out.phase = q.phase;
    out.measured = q.measured;
    if (q.follow_up_of >= static_cast<int>(r)) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", r, ": follow_up_of ", q.follow_up_of, " is not an earlier one"));
    }
    if (q.max_tokens < 1) {
      return absl::InvalidArgumentError(absl::StrCat("request ", r, ": max_tokens must be >= 1"));
    }
    if (q.follow_up_of >= 0) {
      state_[q.follow_up_of].followers.push_back(static_cast<int>(r));
    } else {
      Schedule(q.arrival_s * 1e3 / config_.rate_scale, EventKind::kSend, static_cast<int>(r));
    }
  }
  return absl::OkStatus();
}

double Simulation::StepMs(const StepObservation& s) {
  double ms = config_.profile.timing.StepMs(StepWork::Of(s));
  if (config_.step_jitter > 0) {
    const double sigma = config_.step_jitter;
    ms *= std::exp(sigma * normal_(rng_) - sigma * sigma / 2);
  }
  return ms + config_.host_ms_per_step;
}

void Simulation::Send(int r) {
  RequestState& s = state_[r];
  const SimRequest& q = requests_[r];
  s.sent_ms = now_ms_;
  if (q.follow_up_of >= 0) {
    // The earlier turn's prompt and output, then the new question.
    const RequestState& earlier = state_[q.follow_up_of];
    s.prompt = earlier.prompt;
    const SimRequestResult& e = result_.requests[q.follow_up_of];
    for (int k = 0; k < e.output_tokens; ++k)
      s.prompt.push_back(SimToken(q.follow_up_of, k, config_.profile.shape.vocab_size));
  }
  s.prompt.insert(s.prompt.end(), q.prompt.begin(), q.prompt.end());
  Place(r);
}

void Simulation::Place(int r) {
  RequestState& s = state_[r];
  const SimRequest& q = requests_[r];
  router::PlacementRequest place;
  place.request_id = absl::StrCat("r", r);
  place.model = &model_;
  place.prompt = &s.prompt;
  place.max_tokens = q.max_tokens;
  place.slo = q.slo;
  place.exclude = s.exclude;
  absl::StatusOr<router::PlacementResult> placed = placer_->Place(place);
  if (!placed.ok()) {
    ++result_.counters.rejected;
    Finish(r, std::string(placed.status().message()));
    return;
  }
  s.decode = worker_index_.at(placed->placement.decode.worker_id);
  result_.requests[r].decode_worker = s.decode;
  result_.requests[r].reason = placed->placement.reason;
  result_.requests[r].predicted = placed->placement;
  result_.requests[r].cached_tokens =
      static_cast<int>(s.prompt.size()) - placed->placement.uncached_tokens;
  s.session = placed->decode_session;
  s.lease = registry_.Acquire(s.session, listener_, q.slo.has_value() ? q.slo->tpot_ms : 0,
                              requests_[r].max_tokens);
  s.offload = placed->placement.offload;
  s.learning = router::ForLearning(*placed);
  for (const router::WorkerRef& p : placed->placement.prefill)
    s.prefill.push_back(worker_index_.at(p.worker_id));
  Schedule(now_ms_ + config_.rpc_ms, EventKind::kAtDecode, r);
}

void Simulation::AtDecode(int r) {
  const int w = state_[r].decode;
  if (decode_[w]->busy()) {
    inbox_[w].arrivals.push_back(r);
    return;
  }
  Submit(r);
  MaybeStep(w);
}

void Simulation::Submit(int r) {
  RequestState& s = state_[r];
  if (HandingBack(s.decode)) {
    // A draining worker refuses new requests (EngineLoop::Submit): the router places it again.
    HandBack(r);
    return;
  }
  SimDecodeWorker& w = *decode_[s.decode];
  s.seq = w.Submit(r, s.prompt, requests_[r].max_tokens);
  if (!s.offload || s.prefill.empty()) return;
  // Now, or when blocks free (it waits for them as an offload); with max_awaiting_kv
  // offloads awaiting KV, local chunks.
  if (w.AdmitOrAwaitTransfer(s.seq, [this, r](int cached) { StartTransfer(r, cached); }) ==
      decode::Scheduler::TransferAdmission::kAwaitingKvFull) {
    result_.requests[r].fell_back = true;
    ++result_.counters.fallbacks;
  }
}

void Simulation::StartTransfer(int r, int cached) {
  RequestState& s = state_[r];
  const int tokens = static_cast<int>(s.prompt.size());
  // When it is due at the prefill worker, which orders its queue: as the real decode worker
  // says, at its TTFT objective (the request's own or the router's default); without one at
  // the call's deadline, the attempt timeout (no client deadline here).
  const router::SloConfig& slo = requests_[r].slo.value_or(config_.policy.slo);
  const double due_ms =
      slo.ttft_ms > 0
          ? s.sent_ms + slo.ttft_ms
          : now_ms_ + absl::ToDoubleMilliseconds(decode::OffloadConfig{}.attempt_timeout);
  s.prefill_done.job = SimPrefillJob{.request = r,
                                     .prompt_tokens = tokens,
                                     .transfer_tokens = tokens - cached,
                                     .arrival_ms = now_ms_ + config_.rpc_ms,
                                     .due_ms = due_ms};
  s.job_in_flight = true;
  Schedule(now_ms_ + config_.rpc_ms, EventKind::kAtPrefill, r, s.prefill.front());
}

void Simulation::KvArrived(int r) {
  const int w = state_[r].decode;
  if (decode_[w]->busy()) {
    inbox_[w].kv.push_back(r);
    return;
  }
  TakeKv(r);
  MaybeStep(w);
}

void Simulation::TakeKv(int r) {
  RequestState& s = state_[r];
  emissions_.clear();
  decode_[s.decode]->KvArrived(s.seq, &emissions_);
  result_.requests[r].offloaded = true;
  ++result_.counters.offloaded;
  HandleEmissions(emissions_);
}

void Simulation::MaybeStep(int w) {
  SimDecodeWorker& worker = *decode_[w];
  if (worker.busy()) return;
  StepObservation step;
  if (!worker.StartStep(&step)) return;
  ++result_.counters.steps;
  if (step.num_prefill_tokens > 0) ++result_.counters.mixed_steps;
  step_ms_[w] = StepMs(step);
  Schedule(now_ms_ + step_ms_[w], EventKind::kStepDone, w);
}

void Simulation::StepDone(int w) {
  emissions_.clear();
  decode_[w]->FinishStep(step_ms_[w], &emissions_);
  HandleEmissions(emissions_);
  HandBackUnstarted(w);
  // The inbox, all of it, as the engine loop takes it between steps; then the next plan.
  DecodeInbox in;
  std::swap(in, inbox_[w]);
  for (int r : in.arrivals) Submit(r);
  for (int r : in.kv) TakeKv(r);
  MaybeStep(w);
}

void Simulation::MaybeBatch(int p) {
  const double ms = prefill_[p]->StartBatch(now_ms_);
  if (ms < 0) return;
  ++result_.counters.prefill_batches;
  Schedule(now_ms_ + ms, EventKind::kBatchDone, p);
}

void Simulation::BatchDone(int p) {
  for (const SimPrefillDone& d : prefill_[p]->FinishBatch()) {
    state_[d.job.request].prefill_done = d;
    // The KV has landed; the call's answer (with the first token) takes one hop.
    Schedule(now_ms_ + config_.rpc_ms, EventKind::kKvArrived, d.job.request);
  }
  MaybeBatch(p);
  MaybeFinishSwitch(p);
}

void Simulation::HandleEmissions(const std::vector<Emission>& emissions) {
  // The client sees each token one hop (worker -> router -> client) later.
  const double seen = now_ms_ + config_.rpc_ms;
  for (const Emission& e : emissions) {
    RequestState& s = state_[e.request];
    if (s.first_ms < 0) s.first_ms = seen;
    s.last_ms = seen;
    ++s.tokens;
    if (e.finished) {
      s.seq = nullptr;
      Finish(e.request, "");
    }
  }
}

void Simulation::Finish(int r, const std::string& error) {
  RequestState& s = state_[r];
  SimRequestResult& out = result_.requests[r];
  ++finished_;
  out.prompt_tokens = static_cast<int>(s.prompt.size());
  out.sent_ms = s.sent_ms;
  if (!error.empty()) {
    out.error = error;
  } else {
    out.ok = true;
    out.output_tokens = s.tokens;
    out.ttft_ms = s.first_ms - s.sent_ms;
    out.e2e_ms = s.last_ms - s.sent_ms;
    if (s.tokens > 1) out.tpot_ms = (s.last_ms - s.first_ms) / (s.tokens - 1);
    registry_.Release(s.session, s.lease);
    if (out.offloaded) {
      // What the router learns from a finished offloaded request (the relay's own rule).
      router::LearnFromOffload(PrefillOutcomeOf(s.prefill_done, kFingerprint), s.learning,
                               &cost_model_);
    }
  }
  // Wherever it ended (a step, or its offloaded KV with its only token), its worker may be
  // free to change role now.
  if (s.decode >= 0) MaybeFinishSwitch(s.decode);
  // Its follow-ups go once its client has the last token (or the error): one hop later.
  for (int f : s.followers) {
    Schedule(std::max(now_ms_ + config_.rpc_ms, requests_[f].arrival_s * 1e3 / config_.rate_scale),
             EventKind::kSend, f);
  }
}

void SlotControl::SwitchRole(router::WorkerRole role, const std::string&) {
  sim_->OrderSwitch(slot_, role);
}

void Simulation::Rebalance() {
  router::PlannerSnapshot snapshot;
  registry_.WithLock([&](std::vector<router::WorkerEntry*>& workers, const router::PrefixIndex&) {
    snapshot = router::SnapshotForPlanner(workers, kModelName, cost_model_, config_.policy.slo,
                                          clock_.Now());
  });
  const absl::Time now = clock_.Now();
  bool ordered = false;
  for (const router::RebalanceOrder& order : planner_->Look(snapshot, now)) {
    if (!registry_.RequestSwitch(order.worker_id, order.to, order.reason).ok()) continue;
    ordered = true;
    const auto slot = worker_index_.find(order.worker_id);
    PDS_CHECK(slot != worker_index_.end()) << order.worker_id;
    result_.switches.push_back(
        {.worker = slot->second, .to = order.to, .ordered_ms = now_ms_, .reason = order.reason});
  }
  if (ordered) planner_->Ordered(now);
}

void Simulation::OrderSwitch(int slot, router::WorkerRole to) {
  draining_[slot] = true;
  switch_to_[slot] = to;
  if (!decode_[slot]->busy()) {  // Else at the step's end.
    HandBackUnstarted(slot);
    // The blocks they held may admit what waited for them (streams it preempted, which it
    // finishes before it switches), as the engine loop's next plan would.
    MaybeStep(slot);
  }
  MaybeFinishSwitch(slot);
}

void Simulation::HandBackUnstarted(int w) {
  if (!HandingBack(w)) return;
  for (int r : decode_[w]->Unstarted()) {
    RequestState& s = state_[r];
    if (s.seq->state == decode::SequenceState::kAwaitingKv) {
      // Its transfer was started: cancelled, unless its KV has already landed.
      if (s.job_in_flight) {
        s.job_withdrawn = true;
      } else if (!prefill_[s.prefill.front()]->Withdraw(r)) {
        continue;
      }
    }
    HandBack(r);
  }
  MaybeFinishSwitch(w);
}

void Simulation::HandBack(int r) {
  RequestState& s = state_[r];
  if (s.seq != nullptr) decode_[s.decode]->HandBack(s.seq);
  s.seq = nullptr;
  registry_.Release(s.session, s.lease);
  s.exclude.push_back(absl::StrCat("worker-", s.decode));
  s.decode = -1;
  s.offload = false;
  s.prefill.clear();
  ++result_.counters.handed_back;
  if (++s.handed_back > router::kMaxHandBacks) {
    Finish(r, "handed back by draining decode workers too many times");
    return;
  }
  // Worker -> router: one hop; the placement then sends it on.
  Schedule(now_ms_ + config_.rpc_ms, EventKind::kPlaceAgain, r);
}

void Simulation::MaybeFinishSwitch(int slot) {
  if (!switching_ || !draining_[slot] || finishing_[slot] || !SlotEmpty(slot)) return;
  // It registers again in its new role about one report interval later (the real worker's
  // registry stream closes and reopens).
  finishing_[slot] = true;
  Schedule(now_ms_ + config_.report_interval_ms, EventKind::kSwitchDone, slot);
}

void Simulation::SwitchDone(int slot) {
  finishing_[slot] = false;
  // Work placed just before the order may have arrived meanwhile: it finishes first.
  if (!SlotEmpty(slot)) return;
  if (role_[slot] == router::WorkerRole::kDecode) decode_[slot]->DropCache();
  const router::WorkerRole to = switch_to_[slot];
  absl::StatusOr<uint64_t> session = registry_.Register(InfoOf(to, slot), controls_[slot]);
  PDS_CHECK(session.ok()) << session.status();
  role_[slot] = to;
  draining_[slot] = false;
  if (to == router::WorkerRole::kDecode) {
    decode_session_[slot] = *session;
    prefill_session_[slot] = 0;
    decode_[slot]->TakePrefixEvents();  // Its dropped cache: the new registration knows none.
    registry_.Report(*session, decode_[slot]->TakeReport());
  } else {
    prefill_session_[slot] = *session;
    decode_session_[slot] = 0;
    registry_.Report(*session, WorkerReport{.load = prefill_[slot]->Load(), .steps = {}});
  }
  ++result_.counters.role_switches;
  for (auto it = result_.switches.rbegin(); it != result_.switches.rend(); ++it) {
    if (it->worker == slot && it->done_ms < 0) {
      it->done_ms = now_ms_;
      break;
    }
  }
}

absl::StatusOr<SimResult> Simulation::Run() {
  RETURN_IF_ERROR(Start());
  step_ms_.assign(decode_.size(), 0);
  // Reports and the planner's looks recur for ever: a request that never finishes would keep
  // the loop running. None may take a virtual day after the last arrival.
  double last_arrival_ms = 0;
  for (const SimRequest& q : requests_)
    last_arrival_ms = std::max(last_arrival_ms, q.arrival_s * 1e3 / config_.rate_scale);
  const double give_up_ms = last_arrival_ms + 24 * 3600e3;
  while (!queue_.empty() && finished_ < requests_.size()) {
    const Event e = queue_.top();
    queue_.pop();
    now_ms_ = e.ms;
    if (now_ms_ > give_up_ms) break;
    clock_.Set(epoch_ + absl::Microseconds(static_cast<int64_t>(std::llround(e.ms * 1e3))));
    ++result_.counters.events;
    switch (e.kind) {
      case EventKind::kSend:
        Send(e.a);
        break;
      case EventKind::kAtDecode:
        AtDecode(e.a);
        break;
      case EventKind::kStepDone:
        StepDone(e.a);
        break;
      case EventKind::kAtPrefill: {
        RequestState& s = state_[e.a];
        s.job_in_flight = false;
        if (std::exchange(s.job_withdrawn, false)) break;
        prefill_[e.b]->Submit(s.prefill_done.job);
        MaybeBatch(e.b);
        break;
      }
      case EventKind::kBatchDone:
        BatchDone(e.a);
        break;
      case EventKind::kKvArrived:
        KvArrived(e.a);
        break;
      case EventKind::kDecodeReport:
        if (DecodeActive(e.a)) {
          WorkerReport report = decode_[e.a]->TakeReport();
          report.load.draining = switching_ && draining_[e.a];
          registry_.Report(decode_session_[e.a], report);
          registry_.ApplyPrefix(decode_session_[e.a], decode_[e.a]->TakePrefixEvents());
        }
        Schedule(now_ms_ + config_.report_interval_ms, EventKind::kDecodeReport, e.a);
        break;
      case EventKind::kPrefillReport:
        if (PrefillActive(e.a)) {
          WorkerReport report{.load = prefill_[e.a]->Load(), .steps = {}};
          report.load.draining = switching_ && draining_[e.a];
          registry_.Report(prefill_session_[e.a], report);
        }
        Schedule(now_ms_ + config_.report_interval_ms, EventKind::kPrefillReport, e.a);
        break;
      case EventKind::kRebalance:
        Rebalance();
        Schedule(now_ms_ + absl::ToDoubleMilliseconds(config_.rebalance->interval),
                 EventKind::kRebalance, 0);
        break;
      case EventKind::kSwitchDone:
        SwitchDone(e.a);
        break;
      case EventKind::kPlaceAgain:
        Place(e.a);
        break;
    }
  }
  if (finished_ < requests_.size()) {
    return absl::InternalError(absl::StrCat("simulation stalled: ", requests_.size() - finished_,
                                            " requests never finished"));
  }
  for (const auto& w : decode_) {
    const decode::SchedulerCounters& c = w->counters();
    result_.counters.preemptions += c.preemptions;
    result_.counters.prefix_hit_tokens += c.prefix_hit_tokens;
    result_.counters.prefix_queried_tokens += c.prefix_queried_tokens;
    // Every request ended: anything still held is a leak in the scheduler or the sim.
    const kvcache::BlockCounts b = w->block_counts();
    result_.counters.sequences_left += w->live_sequences();
    result_.counters.blocks_held_at_end += b.in_use + b.reserved + b.quarantined;
  }
  result_.counters.virtual_s = now_ms_ / 1e3;
  for (size_t i = 0; i < draining_.size(); ++i) {
    // One ordered just before the end may still drain; a worker that was empty is not.
    if (draining_[i] && SlotEmpty(static_cast<int>(i)) && !finishing_[i])
      ++result_.counters.role_switches_unfinished;
  }
  return std::move(result_);
}

}  // namespace

absl::Status SimConfig::Validate() const {
  RETURN_IF_ERROR(profile.shape.Validate());
  RETURN_IF_ERROR(profile.timing.Validate());
  RETURN_IF_ERROR(policy.Validate());
  if (decode_workers < 1) return absl::InvalidArgumentError("--decode_workers: must be >= 1");
  if (prefill_workers < 0) return absl::InvalidArgumentError("--prefill_workers: must be >= 0");
  if (!(rpc_ms >= 0)) return absl::InvalidArgumentError("--rpc_ms: must be >= 0");
  if (!(report_interval_ms > 0))
    return absl::InvalidArgumentError("--report_interval_ms: must be > 0");
  if (!(rate_scale > 0)) return absl::InvalidArgumentError("--rate: the scale must be > 0");
  if (!(step_jitter >= 0 && step_jitter <= 1))
    return absl::InvalidArgumentError("--step_jitter: must be in [0, 1]");
  if (rebalance.has_value()) RETURN_IF_ERROR(rebalance->Validate());
  return absl::OkStatus();
}

absl::StatusOr<SimResult> Simulate(const SimConfig& config,
                                   const std::vector<SimRequest>& requests) {
  RETURN_IF_ERROR(config.Validate());
  Simulation sim(config, requests);
  return sim.Run();
}

}  // namespace pdserve::sim
