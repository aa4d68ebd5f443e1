// The router's view of the cluster: every registered worker (one per registry stream), its
// latest load report, the prefix index of the decode workers' caches, and the router's own
// requests on each worker. A worker whose stream closes, or that stays silent past the report
// timeout, is removed, and every request the router is relaying to it is told (it then ends
// with UNAVAILABLE instead of hanging). Step samples in load reports feed the cost model.
// Thread-safety: all methods are safe from any thread; placement runs under WithLock().
#ifndef PDSERVE_ROUTER_WORKER_REGISTRY_H_
#define PDSERVE_ROUTER_WORKER_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "router/arrival_mix.h"
#include "router/cost_model.h"
#include "router/prefix_index.h"
#include "router/router_metrics.h"
#include "router/stream_lengths.h"
#include "router/worker_info.h"

namespace pdserve::router {

// Why a request's worker will not finish it.
enum class Interruption {
  kWorkerLeft,      // The worker left the cluster: the request may go to another worker.
  kRouterStopping,  // The router's drain ran out: the request ends here.
};

// Told when a request must end although its worker has not finished it. `message` says why,
// whole (the client's UNAVAILABLE status message).
class WorkerListener {
 public:
  virtual ~WorkerListener() = default;
  virtual void Interrupted(Interruption why, const std::string& message) = 0;
};

// The way back to a registered worker (its registry stream): the router's orders.
class WorkerControl {
 public:
  virtual ~WorkerControl() = default;
  // Tells the worker to change role. Must not block (queues a message on its stream).
  virtual void SwitchRole(WorkerRole role, const std::string& reason) = 0;
};

// One registered worker. Plain data, read and written under the registry's lock.
struct WorkerEntry {
  PrefixIndex::Slot slot = 0;
  uint64_t session = 0;
  WorkerInfo info;
  LoadSnapshot load;  // Latest.
  absl::Time registered;
  absl::Time last_report;
  bool reported = false;  // At least one load report arrived.
  // Requests the router dispatched since the last report (the report does not count them
  // yet), and requests it is relaying now.
  int dispatched_since_report = 0;
  int64_t dispatched_tokens_since_report = 0;  // Their prompts' tokens.
  int in_flight = 0;
  // Requests the router sends it per second, in all and by prompt length (uncached tokens),
  // counted at each dispatch (a prefill worker: each offload it is the primary of). The cost
  // model's estimate of who arrives while a prefill holds the worker.
  static constexpr absl::Duration kArrivalWindow = absl::Seconds(10);
  ArrivalMix arrivals{kArrivalWindow};
  // Attention work per running decode in its latest decode-only step (cost model input).
  double attention_per_decode = 0;
  // Its steps with decodes, as they took (ms): a moving average over the last ~20 reported
  // (0 while it runs no stream). What its streams' TPOT is now, whatever the model predicts.
  double measured_step_ms = 0;
  absl::flat_hash_map<uint64_t, std::shared_ptr<WorkerListener>> listeners;
  // TPOT objectives of the requests relayed to it now (by lease key), and all of them in
  // order: the tightest is what a local prefill there must not break.
  absl::flat_hash_map<uint64_t, double> lease_tpot_ms;
  std::multiset<double> tpot_objectives;
  // The same requests by the tokens they may generate (DecodeCandidate::short_streams).
  StreamLengths streams_by_length;
  // When each of them was relayed to it and the tokens it may generate (its bucket above, and
  // how long the worker would take to finish it: the rebalancing planner's drain time).
  struct LeaseSpan {
    absl::Time acquired;
    int max_tokens = 0;
  };
  absl::flat_hash_map<uint64_t, LeaseSpan> lease_spans;
  // Null when the worker cannot be told anything (tests, the simulator).
  std::shared_ptr<WorkerControl> control;
  // Told to change role; its registration in the new role will replace this entry.
  bool switching = false;
  bool is_decode() const { return info.is_decode(); }
  bool is_prefill() const { return info.is_prefill(); }
  // New work may go to it: not changing role, not stopping.
  bool accepting() const { return !switching && !load.draining; }
};

// A role change the router ordered and has not seen finished: the worker's registration in
// the new role finishes it.
struct PendingSwitch {
  WorkerRole to = WorkerRole::kDecode;
  absl::Time ordered;
  bool seen_draining = false;  // The worker said it stopped taking work.
};

class WorkerRegistry {
 public:
  WorkerRegistry(Clock* clock, absl::Duration report_timeout, CostModel* cost_model,
                 RouterMetrics* metrics);

  // A registry stream's first message. INVALID_ARGUMENT for a malformed registration,
  // FAILED_PRECONDITION when another worker serves the same model name with a different
  // fingerprint. ALREADY_EXISTS when another live process (another epoch, reporting within
  // the report timeout) holds the worker id. The same process reconnecting, or a restarted one
  // whose predecessor went silent, replaces the old registration: requests on it end. So does
  // one that found the holder's address no longer answering as the holder (`unanswered_epoch`:
  // the holder's epoch then; AddressVerifier).
  absl::StatusOr<uint64_t> Register(const WorkerInfo& info,
                                    std::shared_ptr<WorkerControl> control = nullptr,
                                    uint64_t unanswered_epoch = 0);
  // The live registration of `worker_id`, if any.
  std::optional<WorkerInfo> Registered(const std::string& worker_id) const;
  // False when the session is no longer registered (replaced or expired): its stream should
  // close so that the worker registers again. The report's steps train the cost model.
  bool Report(uint64_t session, const WorkerReport& report);
  bool ApplyPrefix(uint64_t session, const PrefixCacheUpdate& update);
  // The stream closed. The worker's requests are interrupted (kWorkerLeft), unless it was
  // changing role: then its calls end by their own streams.
  void Unregister(uint64_t session, const std::string& why);
  // Removes workers whose last report (or registration) is older than the timeout; returns
  // how many. Called every `interval` (0: no expectation): when this call comes more than
  // twice that after the previous one, the router itself was not running (SIGSTOP, a VM
  // stall, a swap storm) and the reports its workers sent meanwhile are still queued unread:
  // the stall is not counted as the workers' silence (their last reports move forward by it).
  int ExpireSilent(absl::Duration interval = absl::ZeroDuration());
  // Interrupts every request on every worker with `message` (the router's drain ran out);
  // the workers stay registered. Returns how many requests were told.
  int InterruptAll(const std::string& message);

  // A request runs on `session`'s worker: counted in its in-flight, and `listener` is told if
  // the worker leaves; its TPOT objective (0: none) and the tokens it may generate
  // (max_tokens; 0: unknown) are the worker's until Release. Returns a key for Release, or 0 if
  // the worker is already gone.
  uint64_t Acquire(uint64_t session, std::shared_ptr<WorkerListener> listener,
                   double tpot_objective_ms = 0, int max_tokens = 0);
  void Release(uint64_t session, uint64_t key);

  // Runs `fn` with the registry locked: placement reads and updates entries atomically.
  // `fn` must be quick and must not call back into the registry.
  void WithLock(
      const std::function<void(std::vector<WorkerEntry*>& workers, const PrefixIndex& prefix)>& fn);

  // Every registered worker, decode workers first, by id.
  std::vector<WorkerStatus> Status() const;
  int size() const;
  // The clock the registry (and the placer, for arrival rates) reads.
  Clock* clock() const { return clock_; }
  // Decode workers registered and reporting (the router can place requests).
  int ReadyDecodeWorkers() const;
  // `observer` is called with ReadyDecodeWorkers() now and whenever it changes, under the
  // registry's lock (it must be quick and must not call back into the registry): the
  // router's readiness follows its workers at once rather than at its next sweep.
  void ObserveReadyDecodeWorkers(std::function<void(int ready)> observer);
  // Requests the accepting decode workers hold at most: their running slots (max_num_seqs)
  // plus `waiting_per_worker` each (per-client shares are of this).
  int64_t DecodeRequestSlots(int waiting_per_worker) const;

  // Orders worker `worker_id` to change to `role` (`pdctl switch-role`, the planner): from
  // now on nothing new is placed on it; it finishes what it runs and registers again in the
  // new role. FAILED_PRECONDITION saying why when the worker is unknown, cannot switch
  // (started without --role_switching), has that role, is switching already, when a switch the
  // other way is in progress (switches the same way may run together), or when it is the last
  // worker of its role and model taking work. Returns what was done. Logged and counted either way.
  absl::StatusOr<std::string> RequestSwitch(const std::string& worker_id, WorkerRole role,
                                            const std::string& reason);
  // Role changes ordered and not yet finished, by worker id.
  absl::flat_hash_map<std::string, PendingSwitch> PendingSwitches() const;

 private:
  struct Removal {
    std::vector<std::shared_ptr<WorkerListener>> listeners;
    Interruption why = Interruption::kWorkerLeft;
    std::string message;  // What the listeners are told.
  };
  WorkerEntry* FindSessionLocked(uint64_t session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a removal interrupts the calls of a worker that is changing role.
  enum class CallsOfASwitchingWorker { kInterrupt, kLeave };
  Removal RemoveLocked(WorkerEntry* entry, const std::string& why,
                       CallsOfASwitchingWorker calls = CallsOfASwitchingWorker::kInterrupt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishCountsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Notify(Removal removal);
  // A worker's state learned from its steps (WorkerEntry's fields of the same names).
  struct StepLearning {
    double attention_per_decode = 0;
    double measured_step_ms = 0;
  };
  // Feeds `steps` to the cost model and returns `learned` updated by them; takes no mu_.
  StepLearning LearnFromSteps(uint64_t fingerprint, StepLearning learned,
                              const std::vector<StepObservation>& steps) ABSL_LOCKS_EXCLUDED(mu_);

  Clock* clock_;
  const absl::Duration report_timeout_;
  absl::Time last_expire_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  CostModel* cost_model_;
  RouterMetrics* metrics_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<WorkerEntry>> slots_ ABSL_GUARDED_BY(mu_);  // Null: free slot.
  std::vector<WorkerEntry*> live_ ABSL_GUARDED_BY(mu_);                   // Registered entries.
  // The same entries by session: a report, a prefix update and a lease find theirs without a
  // walk over the whole fleet.
  absl::flat_hash_map<uint64_t, WorkerEntry*> by_session_ ABSL_GUARDED_BY(mu_);
  PrefixIndex prefix_ ABSL_GUARDED_BY(mu_);
  // Registered decode workers that have reported (kept by PublishCountsLocked).
  int ready_decode_workers_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void(int ready)> ready_observer_ ABSL_GUARDED_BY(mu_);
  // Ordered role changes, by worker id: one at a time, finished by the worker's registration
  // in its new role, aborted when it takes work in its old role again, forgotten after
  // kForgetSwitchAfter (a worker that died meanwhile).
  static constexpr absl::Duration kForgetSwitchAfter = absl::Minutes(30);
  absl::flat_hash_map<std::string, PendingSwitch> pending_switches_ ABSL_GUARDED_BY(mu_);
  void EndSwitchLocked(const std::string& worker_id, const char* outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_WORKER_REGISTRY_H_
