// The decode worker's side of an offloaded prefill (docs/architecture.md).
//
// A Decode.Generate that names prefill workers is admitted AWAITING_KV: blocks for the whole
// prompt are allocated after prefix-cache reuse, the uncached suffix's blocks are reserved
// for one transfer (a one-time token, this worker's epoch), and Prefill is called on the
// first prefill worker. When both the call's answer (the first token) and the transfer's
// completion are in, the sequence joins the running batch with its whole prompt computed.
//
// Failure without loss: a failed call, a deadline, or a completion that never comes moves
// on to the next prefill worker (while the request's deadline allows) and finally to local
// chunked prefill. Blocks that a failed or cancelled attempt may still be writing are
// quarantined, replaced by fresh blocks for the sequence, and freed only when the prefill
// worker acknowledges (CancelPrefill) that it stopped writing, or is known to have stopped:
// its connection refused for `dead_after` (the process is gone), or the attempt's deadline
// passed (a prefill worker stops writing at its request's deadline; a stopped process that
// continues later writes nothing after it). A Prefill call left unanswered is checked with
// grpc.health: a worker that does not answer fails the attempt early (liveness_*). A refusal before
// any compute (FAILED_PRECONDITION, INVALID_ARGUMENT, RESOURCE_EXHAUSTED: layout or model mismatch,
// bad target, prompt too long) wrote nothing, so its blocks are reused at once. Through a
// staging transport (a KV pool in device memory) the sender writes staging blocks and the
// transport lands them with a copy: the sequence's blocks are quarantined only if that copy was
// running (InboundTransfer::ExpectedBlocksMayBeWritten); the held InboundTransfer keeps the
// staging blocks until the writer stopped. The coordinator itself never copies or waits.
//
// Threading: every piece of state lives on the engine loop's thread. The prefill client's and
// the transport's callbacks only post events to the loop; the loop's iteration hook runs the
// timers, on the injected clock. Handle() is called from gRPC threads.
#ifndef PDSERVE_DECODE_WORKER_OFFLOAD_COORDINATOR_H_
#define PDSERVE_DECODE_WORKER_OFFLOAD_COORDINATOR_H_

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "decode_worker/engine_loop.h"
#include "decode_worker/prefill_client.h"
#include "kvtransfer/kv_transport.h"

namespace pdserve::decode {

struct OffloadConfig {
  // Longest one prefill attempt (call plus transfer) may take when the request's own
  // deadline is later. Default 60 s.
  absl::Duration attempt_timeout = absl::Seconds(60);
  // After Prefill answered OK, how long the transfer's completion may take to arrive.
  // Default 5 s.
  absl::Duration completion_timeout = absl::Seconds(5);
  // An attempt starts only while at least this much of the request's deadline is left;
  // otherwise the prefill runs locally. Default 50 ms.
  absl::Duration min_attempt_budget = absl::Milliseconds(50);
  // A prefill worker unreachable for this long after a failed attempt is taken as dead and
  // the blocks it might have written are freed. Default 2 s.
  absl::Duration dead_after = absl::Seconds(2);
  // Interval between CancelPrefill retries to an unreachable worker. Default 200 ms.
  absl::Duration cancel_retry = absl::Milliseconds(200);
  // While a Prefill call is unanswered, its worker's grpc.health is checked this often; a
  // worker that does not answer within liveness_timeout (stopped, hung, partitioned) fails
  // the attempt at once instead of at its deadline. Defaults 500 ms and 1 s.
  absl::Duration liveness_interval = absl::Milliseconds(500);
  absl::Duration liveness_timeout = absl::Seconds(1);

  absl::Status Validate() const;
};

class OffloadCoordinator {
 public:
  // `pool` is this worker's served pool (ServePool's descriptor). `client` reaches the prefill
  // workers and must outlive the coordinator. The loop must be stopped before the coordinator
  // is destroyed.
  OffloadCoordinator(EngineLoop* loop, kvtransfer::KvTransport* transport,
                     kvtransfer::KvPoolDescriptor pool, PrefillClient* client, Clock* clock,
                     const OffloadConfig& config);
  ~OffloadCoordinator();

  // Installs the loop hooks (cancel handler, timers). Call before the loop starts.
  void Attach();
  // The DecodeService's offload handler: takes over `seq`, to be prefilled by `targets` in
  // order (then locally) within `budget` (OffloadBudget). Errors as EngineLoop::Submit.
  absl::Status Handle(std::unique_ptr<Sequence> seq, std::vector<PrefillTarget> targets,
                      OffloadBudget budget);

  // Offloads in progress and quarantined transfers (loop thread; for tests and stats).
  int offloads_in_progress() const { return static_cast<int>(offloads_.size()); }
  int quarantined_transfers() const { return static_cast<int>(quarantine_.size()); }

 private:
  struct Offload;
  struct Attempt;
  struct Quarantine;
  class Poster;

  // Loop thread.
  void OnAdded(Sequence* seq, std::shared_ptr<Offload> offload);
  // `seq` was admitted AWAITING_KV (at once, or after waiting for blocks): reserve and start.
  void ContinueAdmitted(Sequence* seq, std::shared_ptr<Offload> offload);
  void StartAttempt(Offload* offload);
  void OnCallDone(const std::shared_ptr<Attempt>& attempt, absl::StatusOr<PrefillResult> result);
  void OnTransferDone(const std::shared_ptr<Attempt>& attempt);
  void SendLivenessCheck(const std::shared_ptr<Attempt>& attempt);
  void OnLivenessDone(const std::shared_ptr<Attempt>& attempt, const absl::Status& status);
  void Complete(Attempt* attempt);
  // Ends `attempt` (its sequence moves on): `maybe_written` blocks are quarantined and
  // replaced; then the next prefill worker or local prefill.
  void AttemptFailed(Attempt* attempt, const std::string& cause, bool maybe_written);
  void FallBackToLocal(Offload* offload, const std::string& cause);
  // Its client cancelled, or it is handed back: the transfer is stopped (its blocks
  // quarantined until the writer stopped) and the sequence ends at once.
  void EndAwaitingKv(Sequence* seq, EngineLoop::AwaitingKvEnd how);
  // Quarantines what `attempt`'s writer may still write and asks the prefill worker to stop.
  // True when that includes the sequence's blocks (they leave it); false when only the
  // transport's own (staging) blocks may be written, and the sequence's are un-reserved and
  // stay.
  bool QuarantineAttempt(Attempt* attempt);
  void SendCancel(const std::shared_ptr<Quarantine>& q);
  void OnCancelDone(const std::shared_ptr<Quarantine>& q,
                    const absl::StatusOr<bool>& writes_stopped);
  void Release(Quarantine* q, const char* why);
  // The timers, once per loop iteration; true while attempts or quarantined blocks remain.
  bool Tick();
  // Records that `seq`'s offload was given up (`cause`): outcome, timings and counters.
  void MarkFellBack(Sequence* seq, const std::string& cause);
  void FinishOffload(Sequence* seq);

  EngineLoop* loop_;
  kvtransfer::KvTransport* transport_;
  const kvtransfer::KvPoolDescriptor pool_;
  PrefillClient* client_;
  Clock* clock_;
  const OffloadConfig config_;
  std::shared_ptr<Poster> poster_;
  std::mt19937_64 rng_;  // Transfer tokens (loop thread).
  absl::flat_hash_map<Sequence*, std::shared_ptr<Offload>> offloads_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Attempt>> attempts_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Quarantine>> quarantine_;
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_OFFLOAD_COORDINATOR_H_
