#include "router/worker_registry.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace pdserve::router {

WorkerRegistry::WorkerRegistry(Clock* clock, absl::Duration report_timeout, CostModel* cost_model,
                               RouterMetrics* metrics)
    : clock_(clock), report_timeout_(report_timeout), cost_model_(cost_model), metrics_(metrics) {}

absl::StatusOr<uint64_t> WorkerRegistry::Register(const WorkerInfo& info,
                                                  std::shared_ptr<WorkerControl> control,
                                                  uint64_t unanswered_epoch) {
  if (absl::Status s = info.Validate(); !s.ok()) return s;
  Removal replaced;
  uint64_t session;
  {
    absl::MutexLock lock(&mu_);
    for (WorkerEntry* e : live_) {
      const WorkerInfo& other = e->info;
      if (other.worker_id != info.worker_id && other.model == info.model &&
          other.model_fingerprint != info.model_fingerprint) {
        return absl::FailedPreconditionError(absl::StrCat(
            "registration.model_fingerprint: worker ", other.worker_id, " serves model '",
            other.model, "' with fingerprint ", absl::Hex(other.model_fingerprint),
            ", this one has ", absl::Hex(info.model_fingerprint),
            "; give different models different names"));
      }
    }
    auto same = std::find_if(live_.begin(), live_.end(),
                             [&](WorkerEntry* e) { return e->info.worker_id == info.worker_id; });
    if (same != live_.end()) {
      const WorkerEntry& old = **same;
      const absl::Duration silent = clock_->Now() - old.last_report;
      // Another process with this id that is still reporting: refused, so that two workers
      // configured with one id cannot evict each other forever. The same process
      // reconnecting (same epoch), or a restarted one whose predecessor went silent, replaces
      // the old registration.
      const bool unanswered = unanswered_epoch != 0 && old.info.epoch == unanswered_epoch;
      if (old.info.epoch != info.epoch && silent <= report_timeout_ && !unanswered) {
        return absl::AlreadyExistsError(absl::StrCat(
            "registration.worker_id: '", info.worker_id, "' is registered by a live worker (at ",
            old.info.grpc_address, ", epoch ", old.info.epoch, ", last report ",
            absl::FormatDuration(silent), " ago); give each worker its own --worker_id"));
      }
      replaced = RemoveLocked(
          *same,
          absl::StrCat("worker ", info.worker_id, " registered again (epoch ", info.epoch,
                       unanswered ? "; the previous one did not answer at its address" : "", ")"),
          CallsOfASwitchingWorker::kLeave);
    }
    if (auto it = pending_switches_.find(info.worker_id); it != pending_switches_.end()) {
      EndSwitchLocked(info.worker_id, it->second.to == info.role ? "completed" : "aborted");
    }
    auto entry = std::make_unique<WorkerEntry>();
    entry->session = session = next_session_++;
    entry->info = info;
    entry->control = std::move(control);
    entry->registered = clock_->Now();
    entry->last_report = entry->registered;
    PrefixIndex::Slot slot = 0;
    while (slot < slots_.size() && slots_[slot] != nullptr) ++slot;
    entry->slot = slot;
    live_.push_back(entry.get());
    by_session_[session] = entry.get();
    if (slot == slots_.size()) {
      slots_.push_back(std::move(entry));
    } else {
      slots_[slot] = std::move(entry);
    }
    PublishCountsLocked();
  }
  PDS_LOG(INFO) << "registered " << RoleName(info.role) << " worker " << info.worker_id << " at "
                << info.grpc_address << " (model " << info.model << ", epoch " << info.epoch << ")";
  // The old stream of a replaced registration closes at its next message (Report says the
  // session is gone).
  if (!replaced.message.empty()) Notify(std::move(replaced));
  return session;
}

WorkerEntry* WorkerRegistry::FindSessionLocked(uint64_t session) {
  auto it = by_session_.find(session);
  return it == by_session_.end() ? nullptr : it->second;
}

WorkerRegistry::StepLearning WorkerRegistry::LearnFromSteps(
    uint64_t fingerprint, StepLearning learned, const std::vector<StepObservation>& steps) {
  for (const StepObservation& s : steps) {
    if (s.duration_ms <= 0) continue;
    const StepWork work = StepWork::Of(s);
    const double decode = work.decode;
    const double prefill = work.prefill_tokens;
    // Decode-only baseline of this step, before learning from it.
    const double baseline = cost_model_->StepMs(
        fingerprint, {.decode = decode, .decode_attention = decode * learned.attention_per_decode});
    const double predicted = cost_model_->ObserveStep(fingerprint, work, s.duration_ms);
    if (predicted > 0) metrics_->step_prediction_ratio.Observe(s.duration_ms / predicted);
    if (decode > 0) {
      constexpr double kWeight = 0.05;  // ~20 steps: a few reports.
      learned.measured_step_ms =
          learned.measured_step_ms > 0
              ? (1 - kWeight) * learned.measured_step_ms + kWeight * s.duration_ms
              : s.duration_ms;
    }
    if (prefill == 0 && decode > 0) {
      learned.attention_per_decode = work.decode_attention / decode;
    } else if (prefill > 0 && decode > 0) {
      metrics_->interference_predicted_seconds.Increment(std::max(0.0, predicted - baseline) *
                                                         decode / 1000.0);
      metrics_->interference_observed_seconds.Increment(std::max(0.0, s.duration_ms - baseline) *
                                                        decode / 1000.0);
    }
  }
  return learned;
}

bool WorkerRegistry::Report(uint64_t session, const WorkerReport& report) {
  // What the steps teach (the cost model's fit, under the cost model's own lock) is learned
  // outside mu_, which every placement decision takes: among 256 workers, each report's
  // steps learned under it held decisions up behind them. A session's reports come in order
  // on its one stream, so nothing else writes its learned state in between.
  std::optional<StepLearning> learned;
  if (!report.steps.empty()) {
    uint64_t fingerprint;
    {
      absl::MutexLock lock(&mu_);
      const WorkerEntry* e = FindSessionLocked(session);
      if (e == nullptr) return false;
      fingerprint = e->info.model_fingerprint;
      learned = StepLearning{.attention_per_decode = e->attention_per_decode,
                             .measured_step_ms = e->measured_step_ms};
    }
    learned = LearnFromSteps(fingerprint, *learned, report.steps);
  }
  absl::MutexLock lock(&mu_);
  WorkerEntry* e = FindSessionLocked(session);
  if (e == nullptr) return false;
  if (learned.has_value()) {
    e->attention_per_decode = learned->attention_per_decode;
    e->measured_step_ms = learned->measured_step_ms;
  }
  if (report.load.running == 0) e->measured_step_ms = 0;  // No stream: nothing to slow.
  const bool was_accepting = e->accepting();
  e->load = report.load;
  if (e->switching) {
    // A worker that stopped taking work for a switch and takes it again kept its role (its
    // drain ran out, say): the switch is over.
    auto pending = pending_switches_.find(e->info.worker_id);
    if (pending == pending_switches_.end()) {
      e->switching = false;  // Forgotten (kForgetSwitchAfter).
    } else if (report.load.draining) {
      pending->second.seen_draining = true;
    } else if (pending->second.seen_draining) {
      e->switching = false;
      EndSwitchLocked(e->info.worker_id, "aborted");
    }
  }
  if (was_accepting != e->accepting()) PublishCountsLocked();
  e->last_report = clock_->Now();
  e->dispatched_since_report = 0;
  e->dispatched_tokens_since_report = 0;
  if (!e->reported) {
    e->reported = true;
    PublishCountsLocked();
  }
  return true;
}

bool WorkerRegistry::ApplyPrefix(uint64_t session, const PrefixCacheUpdate& update) {
  absl::MutexLock lock(&mu_);
  WorkerEntry* e = FindSessionLocked(session);
  if (e == nullptr) return false;
  if (e->is_decode()) prefix_.Apply(e->slot, update.reset, update.stored, update.evicted);
  return true;
}

WorkerRegistry::Removal WorkerRegistry::RemoveLocked(WorkerEntry* e, const std::string& why,
                                                     CallsOfASwitchingWorker calls) {
  Removal r;
  r.message = absl::StrCat(RoleName(e->info.role), " worker ", e->info.worker_id,
                           " left the cluster: ", why);
  // A worker changing role closes its registration (or registers anew) once its work is done:
  // what the router still relays from it is its last messages on their way, not lost work.
  // Each call ends by its own stream (a worker that died meanwhile fails them, and they are
  // placed again). A worker that went silent is another matter: its calls are interrupted.
  if (!(e->switching && calls == CallsOfASwitchingWorker::kLeave)) {
    for (auto& [key, listener] : e->listeners) r.listeners.push_back(std::move(listener));
  }
  prefix_.RemoveWorker(e->slot);
  live_.erase(std::find(live_.begin(), live_.end(), e));
  by_session_.erase(e->session);
  PDS_LOG(WARNING) << "removed " << RoleName(e->info.role) << " worker " << e->info.worker_id
                   << ": " << why << " (" << r.listeners.size() << " requests on it)";
  slots_[e->slot].reset();
  metrics_->worker_removals.Increment();
  PublishCountsLocked();
  return r;
}

void WorkerRegistry::Notify(Removal removal) {
  for (auto& listener : removal.listeners) listener->Interrupted(removal.why, removal.message);
}

int WorkerRegistry::InterruptAll(const std::string& message) {
  Removal all;
  all.why = Interruption::kRouterStopping;
  all.message = message;
  {
    absl::MutexLock lock(&mu_);
    for (WorkerEntry* e : live_) {
      for (const auto& [key, listener] : e->listeners) all.listeners.push_back(listener);
    }
  }
  const int told = static_cast<int>(all.listeners.size());
  Notify(std::move(all));
  return told;
}

void WorkerRegistry::Unregister(uint64_t session, const std::string& why) {
  Removal removal;
  {
    absl::MutexLock lock(&mu_);
    WorkerEntry* e = FindSessionLocked(session);
    if (e == nullptr) return;
    removal = RemoveLocked(e, why, CallsOfASwitchingWorker::kLeave);
  }
  Notify(std::move(removal));
}

int WorkerRegistry::ExpireSilent(absl::Duration interval) {
  std::vector<Removal> removals;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    const absl::Duration since = now - last_expire_;
    if (interval > absl::ZeroDuration() && last_expire_ != absl::InfinitePast() &&
        since > 2 * interval) {
      // The router was stalled: its workers' reports wait in its sockets. They get back the
      // time it stood still, and expire only if they stay silent once it runs again.
      const absl::Duration stall = since - interval;
      PDS_LOG(WARNING) << "the router did not run for " << absl::FormatDuration(stall)
                       << " (its sweep came " << absl::FormatDuration(since) << " after the last, "
                       << "every " << absl::FormatDuration(interval)
                       << " expected): not counted as its workers' silence";
      for (WorkerEntry* e : live_) e->last_report = std::min(now, e->last_report + stall);
      if (metrics_ != nullptr) metrics_->router_stalls.Increment();
    }
    last_expire_ = now;
    std::vector<WorkerEntry*> silent;
    for (WorkerEntry* e : live_) {
      if (now - e->last_report > report_timeout_) silent.push_back(e);
    }
    for (WorkerEntry* e : silent) {
      removals.push_back(RemoveLocked(
          e, absl::StrCat("no load report for ", absl::FormatDuration(now - e->last_report),
                          " (timeout ", absl::FormatDuration(report_timeout_), ")")));
    }
  }
  for (Removal& r : removals) Notify(std::move(r));
  return static_cast<int>(removals.size());
}

uint64_t WorkerRegistry::Acquire(uint64_t session, std::shared_ptr<WorkerListener> listener,
                                 double tpot_objective_ms, int max_tokens) {
  absl::MutexLock lock(&mu_);
  WorkerEntry* e = FindSessionLocked(session);
  if (e == nullptr) return 0;
  const uint64_t key = next_key_++;
  e->listeners[key] = std::move(listener);
  ++e->in_flight;
  if (tpot_objective_ms > 0) {
    e->lease_tpot_ms[key] = tpot_objective_ms;
    e->tpot_objectives.insert(tpot_objective_ms);
  }
  if (max_tokens > 0) {
    e->streams_by_length.Add(StreamLengthBucket(max_tokens), tpot_objective_ms);
    e->lease_spans[key] = WorkerEntry::LeaseSpan{clock_->Now(), max_tokens};
  }
  return key;
}

void WorkerRegistry::Release(uint64_t session, uint64_t key) {
  absl::MutexLock lock(&mu_);
  WorkerEntry* e = FindSessionLocked(session);
  if (e == nullptr) return;
  if (e->listeners.erase(key) > 0) --e->in_flight;
  double objective = 0;
  if (auto it = e->lease_tpot_ms.find(key); it != e->lease_tpot_ms.end()) {
    objective = it->second;
    e->tpot_objectives.erase(e->tpot_objectives.find(it->second));
    e->lease_tpot_ms.erase(it);
  }
  if (auto it = e->lease_spans.find(key); it != e->lease_spans.end()) {
    e->streams_by_length.Remove(StreamLengthBucket(it->second.max_tokens), objective);
    e->lease_spans.erase(it);
  }
}

void WorkerRegistry::WithLock(
    const std::function<void(std::vector<WorkerEntry*>& workers, const PrefixIndex& prefix)>& fn) {
  absl::MutexLock lock(&mu_);
  fn(live_, prefix_);
}

int WorkerRegistry::ReadyDecodeWorkers() const {
  absl::MutexLock lock(&mu_);
  return ready_decode_workers_;
}

std::optional<WorkerInfo> WorkerRegistry::Registered(const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  for (const WorkerEntry* e : live_)
    if (e->info.worker_id == worker_id) return e->info;
  return std::nullopt;
}

int64_t WorkerRegistry::DecodeRequestSlots(int waiting_per_worker) const {
  absl::MutexLock lock(&mu_);
  int64_t slots = 0;
  for (const WorkerEntry* e : live_) {
    if (e->is_decode() && e->accepting()) slots += e->info.max_num_seqs + waiting_per_worker;
  }
  return slots;
}

void WorkerRegistry::PublishCountsLocked() {
  int counts[2][3] = {};  // [decode|prefill][registering|ready|draining]
  for (const WorkerEntry* e : live_) {
    ++counts[e->is_decode() ? 0 : 1][!e->reported ? 0 : e->accepting() ? 1 : 2];
  }
  for (int role = 0; role < 2; ++role) {
    const char* name = role == 0 ? "decode" : "prefill";
    metrics_->Workers(name, "registering").Set(counts[role][0]);
    metrics_->Workers(name, "ready").Set(counts[role][1]);
    metrics_->Workers(name, "draining").Set(counts[role][2]);
  }
  const bool changed = ready_decode_workers_ != counts[0][1];
  ready_decode_workers_ = counts[0][1];
  if (changed && ready_observer_) ready_observer_(ready_decode_workers_);
}

void WorkerRegistry::ObserveReadyDecodeWorkers(std::function<void(int ready)> observer) {
  absl::MutexLock lock(&mu_);
  ready_observer_ = std::move(observer);
  if (ready_observer_) ready_observer_(ready_decode_workers_);
}

void WorkerRegistry::EndSwitchLocked(const std::string& worker_id, const char* outcome) {
  auto it = pending_switches_.find(worker_id);
  if (it == pending_switches_.end()) return;
  const PendingSwitch& p = it->second;
  const absl::Duration took = clock_->Now() - p.ordered;
  PDS_LOG(INFO) << "role switch of " << worker_id << " to " << RoleName(p.to) << " " << outcome
                << " after " << absl::FormatDuration(took);
  if (metrics_ != nullptr) {
    metrics_->RoleSwitches(std::string(RoleName(p.to)), outcome).Increment();
    if (std::string_view(outcome) == "completed")
      metrics_->role_switch_seconds.Observe(absl::ToDoubleSeconds(took));
  }
  pending_switches_.erase(it);
}

absl::StatusOr<std::string> WorkerRegistry::RequestSwitch(const std::string& worker_id,
                                                          WorkerRole role,
                                                          const std::string& reason) {
  std::shared_ptr<WorkerControl> control;
  std::string refused;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (auto it = pending_switches_.begin(); it != pending_switches_.end();) {
      auto next = std::next(it);
      if (now - it->second.ordered > kForgetSwitchAfter) EndSwitchLocked(it->first, "aborted");
      it = next;
    }
    auto found = std::find_if(live_.begin(), live_.end(),
                              [&](WorkerEntry* e) { return e->info.worker_id == worker_id; });
    WorkerEntry* e = found == live_.end() ? nullptr : *found;
    if (e == nullptr) {
      refused = absl::StrCat("worker_id: no worker '", worker_id, "' is registered");
    } else if (e->info.role == role) {
      refused = absl::StrCat("role: ", worker_id, " is a ", RoleName(role), " worker already");
    } else if (!e->info.role_switching || e->control == nullptr) {
      refused = absl::StrCat(worker_id, " cannot change role (start it with --role_switching)");
    } else if (auto mine = pending_switches_.find(worker_id); mine != pending_switches_.end()) {
      refused = absl::StrCat("a role switch of ", worker_id, " is in progress (to ",
                             RoleName(mine->second.to), ", ordered ",
                             absl::FormatDuration(now - mine->second.ordered), " ago)");
    } else if (auto other = std::find_if(pending_switches_.begin(), pending_switches_.end(),
                                         [&](const auto& p) { return p.second.to != role; });
               other != pending_switches_.end()) {
      // Switches the same way may run together (a shift of the mix can call for several);
      // the other way at once would undo one with another.
      refused = absl::StrCat("a role switch the other way is in progress (", other->first, " to ",
                             RoleName(other->second.to), ", ordered ",
                             absl::FormatDuration(now - other->second.ordered), " ago)");
    } else {
      int others = 0;  // Of its role and model, taking work.
      for (const WorkerEntry* o : live_) {
        if (o != e && o->info.role == e->info.role && o->info.model == e->info.model &&
            o->reported && o->accepting()) {
          ++others;
        }
      }
      if (others == 0) {
        refused =
            absl::StrCat(worker_id, " is the last ", RoleName(e->info.role), " worker of model '",
                         e->info.model, "' taking work: a role may not be left empty");
      } else {
        e->switching = true;
        pending_switches_[worker_id] = PendingSwitch{.to = role, .ordered = now};
        control = e->control;
        PublishCountsLocked();
      }
    }
    if (metrics_ != nullptr)
      metrics_->RoleSwitches(std::string(RoleName(role)), refused.empty() ? "started" : "refused")
          .Increment();
  }
  if (!refused.empty()) {
    PDS_LOG(WARNING) << "refused role switch of " << worker_id << " to " << RoleName(role) << ": "
                     << refused;
    return absl::FailedPreconditionError(refused);
  }
  control->SwitchRole(role, reason);
  const std::string done =
      absl::StrCat(worker_id, " told to become a ", RoleName(role), " worker (", reason, ")");
  PDS_LOG(INFO) << done;
  return done;
}

absl::flat_hash_map<std::string, PendingSwitch> WorkerRegistry::PendingSwitches() const {
  absl::MutexLock lock(&mu_);
  return pending_switches_;
}

std::vector<WorkerStatus> WorkerRegistry::Status() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  std::vector<const WorkerEntry*> sorted(live_.begin(), live_.end());
  std::sort(sorted.begin(), sorted.end(), [](const WorkerEntry* a, const WorkerEntry* b) {
    if (a->is_decode() != b->is_decode()) return a->is_decode();
    return a->info.worker_id < b->info.worker_id;
  });
  std::vector<WorkerStatus> status;
  status.reserve(sorted.size());
  for (const WorkerEntry* e : sorted) {
    status.push_back(
        WorkerStatus{.info = e->info,
                     .load = e->load,
                     .since_report = now - e->last_report,
                     .registered_for = now - e->registered,
                     .router_in_flight = e->in_flight,
                     .indexed_blocks = static_cast<int64_t>(prefix_.blocks_of(e->slot)),
                     .switching = e->switching});
  }
  return status;
}

int WorkerRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(live_.size());
}

}  // namespace pdserve::router
