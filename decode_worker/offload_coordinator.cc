#include "decode_worker/offload_coordinator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "decode_worker/step_report.h"

namespace pdserve::decode {
namespace {

// Codes with which a prefill worker refuses a request before computing or writing anything.
bool RefusedBeforeWriting(absl::StatusCode code) {
  return code == absl::StatusCode::kFailedPrecondition ||
         code == absl::StatusCode::kInvalidArgument ||
         code == absl::StatusCode::kResourceExhausted || code == absl::StatusCode::kUnimplemented;
}

std::string CauseOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kFailedPrecondition:
      return "layout_mismatch";
    case absl::StatusCode::kDeadlineExceeded:
      return "prefill_deadline";
    default:
      return "prefill_error";
  }
}

}  // namespace

absl::Status OffloadConfig::Validate() const {
  auto positive = [](const char* flag, absl::Duration d) -> absl::Status {
    if (d <= absl::ZeroDuration())
      return absl::InvalidArgumentError(absl::StrCat(flag, ": must be > 0"));
    return absl::OkStatus();
  };
  if (absl::Status s = positive("--offload_attempt_timeout", attempt_timeout); !s.ok()) return s;
  if (absl::Status s = positive("--offload_completion_timeout", completion_timeout); !s.ok())
    return s;
  if (absl::Status s = positive("--offload_dead_after", dead_after); !s.ok()) return s;
  if (absl::Status s = positive("--offload_cancel_retry", cancel_retry); !s.ok()) return s;
  if (absl::Status s = positive("--offload_liveness_interval", liveness_interval); !s.ok())
    return s;
  if (absl::Status s = positive("--offload_liveness_timeout", liveness_timeout); !s.ok()) return s;
  if (min_attempt_budget < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--offload_min_attempt_budget: must be >= 0");
  }
  return absl::OkStatus();
}

// Posts callbacks from the prefill client's and the transport's threads to the loop, until the
// coordinator goes; counts the client calls in flight so that the destructor can wait for them.
class OffloadCoordinator::Poster {
 public:
  explicit Poster(EngineLoop* loop) : loop_(loop) {}
  void Post(std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    if (loop_ != nullptr) loop_->Post(std::move(fn));
  }
  void CallStarted() {
    absl::MutexLock lock(&mu_);
    ++calls_;
  }
  void CallDone() {
    absl::MutexLock lock(&mu_);
    --calls_;
  }
  // Stops posting; waits (bounded) until no gRPC callback can still run.
  void Close(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    loop_ = nullptr;
    auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return calls_ == 0; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&idle), timeout)) {
      PDS_LOG(WARNING) << "offload: " << calls_ << " calls still in flight at shutdown";
    }
  }

 private:
  absl::Mutex mu_;
  EngineLoop* loop_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// One request's offload, while its sequence is AWAITING_KV.
struct OffloadCoordinator::Offload {
  Sequence* seq = nullptr;
  std::vector<PrefillTarget> targets;
  size_t next_target = 0;
  absl::Time deadline;
  // Past this, no attempt runs on: max(the TTFT deadline, admission + 2 x predicted).
  absl::Time offload_cutoff = absl::InfiniteFuture();
  OffloadBudget budget;
  int cached_tokens = 0;             // Prefix-cache hit: positions not transferred.
  std::shared_ptr<Attempt> current;  // The attempt in flight, if any.
};

// One Prefill call and the transfer it writes. Shared with the client's and transport's
// callbacks.
struct OffloadCoordinator::Attempt {
  Offload* offload = nullptr;  // Null once the sequence moved on (the attempt is dead).
  PrefillTarget target;
  std::string request_id;
  uint64_t token = 0;
  std::vector<int32_t> blocks;  // Destination blocks (reserved).
  std::shared_ptr<kvtransfer::InboundTransfer> inbound;
  std::shared_ptr<PendingCall> call;
  bool call_done = false;
  absl::StatusOr<PrefillResult> result = absl::UnknownError("no answer yet");
  absl::Time call_ok_at;
  bool transfer_done = false;
  absl::Time deadline;       // The Prefill call's; the worker writes nothing after it.
  absl::Time next_liveness;  // Zero while a health check is in flight.
  std::shared_ptr<PendingCall> liveness;
};

// Blocks a failed or cancelled attempt may still write, until its writer is known to stop.
struct OffloadCoordinator::Quarantine {
  PrefillTarget target;
  uint64_t token = 0;
  std::vector<int32_t> blocks;  // Pool blocks (none when only staging blocks may be written).
  // Held until the writer stopped: with a staging transport, it holds the staging blocks.
  std::shared_ptr<kvtransfer::InboundTransfer> inbound;
  absl::Time since;              // Quarantined at.
  absl::Time writer_deadline;    // The attempt's deadline: the writer stops by then.
  absl::Time unreachable_since;  // First failed CancelPrefill (zero while reachable).
  absl::Time next_try;           // Zero while a CancelPrefill is in flight.
  bool stopped = false;          // The worker acknowledged it stopped writing.
  std::shared_ptr<PendingCall> cancel_call;
};

OffloadCoordinator::OffloadCoordinator(EngineLoop* loop, kvtransfer::KvTransport* transport,
                                       kvtransfer::KvPoolDescriptor pool, PrefillClient* client,
                                       Clock* clock, const OffloadConfig& config)
    : loop_(loop),
      transport_(transport),
      pool_(std::move(pool)),
      client_(client),
      clock_(clock),
      config_(config),
      poster_(std::make_shared<Poster>(loop)),
      rng_(std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32)) {}

OffloadCoordinator::~OffloadCoordinator() {
  // The loop is stopped: nothing else touches the maps. Cancel what is in flight and wait
  // for the callbacks, which hold the call state, so that none outlives the stubs.
  for (auto& [token, attempt] : attempts_) {
    if (attempt->call) attempt->call->Cancel();
    if (attempt->liveness) attempt->liveness->Cancel();
  }
  for (auto& [token, q] : quarantine_) {
    if (q->cancel_call) q->cancel_call->Cancel();
  }
  poster_->Close(absl::Seconds(10));
  for (auto& [token, attempt] : attempts_) transport_->Release(token);
  for (auto& [token, q] : quarantine_) transport_->Release(token);
}

void OffloadCoordinator::Attach() {
  loop_->SetAwaitingKvEndHandler(
      [this](Sequence* seq, EngineLoop::AwaitingKvEnd how) { EndAwaitingKv(seq, how); });
  loop_->SetIterationHook([this] { return Tick(); });
}

absl::Status OffloadCoordinator::Handle(std::unique_ptr<Sequence> seq,
                                        std::vector<PrefillTarget> targets, OffloadBudget budget) {
  auto offload = std::make_shared<Offload>();
  offload->targets = std::move(targets);
  offload->deadline = budget.deadline;
  offload->budget = budget;
  return loop_->Submit(std::move(seq),
                       [this, offload](Sequence* added) { OnAdded(added, offload); });
}

void OffloadCoordinator::OnAdded(Sequence* seq, std::shared_ptr<Offload> offload) {
  offload->seq = seq;
  // Too few free blocks for the prompt (offloads awaiting their KV hold many): it waits for
  // them as an offload. Falling back to local chunks then, as it once did, undid the router's
  // decision when it mattered most: pdserve-sim, heavy-tailed prompts with 1-16 output tokens
  // on one decode worker, 191 offloads of up to 32k tokens prefilled beside the streams, 0.70
  // of requests within their objectives against 0.93 for length_threshold.
  switch (loop_->scheduler().AdmitOrAwaitTransfer(
      seq, [this, offload](Sequence* admitted) { ContinueAdmitted(admitted, offload); })) {
    case Scheduler::TransferAdmission::kAdmitted:
      ContinueAdmitted(seq, std::move(offload));
      return;
    case Scheduler::TransferAdmission::kWaitingForBlocks:
      return;
    case Scheduler::TransferAdmission::kAwaitingKvFull:
      // --max_awaiting_kv offloads already await theirs: it waits for local admission like
      // any other.
      seq->offload.fell_back_to_local = true;
      seq->offload.fallback_cause = "awaiting_kv_full";
      loop_->CountOffload(false, "awaiting_kv_full");
      return;
  }
}

void OffloadCoordinator::ContinueAdmitted(Sequence* seq, std::shared_ptr<Offload> offload) {
  seq->admitted = clock_->Now();
  if (offload->budget.ttft_deadline != absl::InfiniteFuture()) {
    // A prompt the router expected to take longer than the objective (a long one, or a busy
    // prefill pool it still preferred) gets twice its prediction.
    offload->offload_cutoff =
        std::max(offload->budget.ttft_deadline, seq->admitted + 2 * offload->budget.predicted);
  }
  offload->cached_tokens = seq->num_computed;
  offloads_[seq] = offload;
  StartAttempt(offload.get());
}

void OffloadCoordinator::SendLivenessCheck(const std::shared_ptr<Attempt>& attempt) {
  attempt->next_liveness = absl::Time();
  std::shared_ptr<Poster> poster = poster_;
  poster->CallStarted();
  attempt->liveness = client_->CheckAlive(
      attempt->target, clock_->Now() + config_.liveness_timeout,
      [this, poster, attempt](absl::Status status) {
        poster->Post([this, attempt, status] { OnLivenessDone(attempt, status); });
        poster->CallDone();
      });
}

void OffloadCoordinator::OnLivenessDone(const std::shared_ptr<Attempt>& attempt,
                                        const absl::Status& status) {
  if (attempt->offload == nullptr || attempt->call_done) return;  // Moved on meanwhile.
  if (status.ok()) {
    // Serving or draining: alive, and a draining worker still finishes what it took.
    attempt->next_liveness = clock_->Now() + config_.liveness_interval;
    return;
  }
  PDS_LOG(WARNING) << attempt->request_id << ": prefill worker " << attempt->target.worker_id
                   << " does not answer its health check (" << status << "); moving on";
  AttemptFailed(attempt.get(), "prefill_unresponsive", true);  // Cancels the call too.
}

void OffloadCoordinator::StartAttempt(Offload* offload) {
  Sequence* seq = offload->seq;
  const absl::Time now = clock_->Now();
  if (offload->next_target >= offload->targets.size()) {
    FallBackToLocal(offload, seq->offload.fallback_cause.empty() ? "prefill_error"
                                                                 : seq->offload.fallback_cause);
    return;
  }
  if (offload->deadline - now < config_.min_attempt_budget) {
    FallBackToLocal(offload, "prefill_deadline");
    return;
  }
  if (offload->offload_cutoff - now < config_.min_attempt_budget) {
    // The TTFT budget is spent: local prefill from here gives the first token soonest.
    FallBackToLocal(offload, "ttft_budget");
    return;
  }
  auto attempt = std::make_shared<Attempt>();
  attempt->offload = offload;
  attempt->request_id = seq->request_id;
  attempt->target = offload->targets[offload->next_target++];
  attempt->blocks = TransferBlocks(*seq, offload->cached_tokens, pool_.layout.block_size);
  do {
    attempt->token = rng_();
  } while (attempt->token == 0 || attempts_.contains(attempt->token) ||
           quarantine_.contains(attempt->token));

  kvtransfer::TransferExpectation expectation;
  expectation.token = attempt->token;
  expectation.block_ids = attempt->blocks;
  expectation.num_layers = pool_.layout.num_layers;
  auto inbound = transport_->Expect(expectation);
  if (!inbound.ok()) {
    PDS_LOG(WARNING) << seq->request_id << ": cannot reserve a KV transfer: " << inbound.status();
    // Only a staging transport runs out of room here: its pinned pool is bounded.
    FallBackToLocal(offload,
                    absl::IsResourceExhausted(inbound.status()) ? "staging_full" : "no_transport");
    return;
  }
  attempt->inbound = *std::move(inbound);
  loop_->scheduler().blocks()->MarkReserved(attempt->blocks, true);

  PrefillJob job;
  job.request_id = seq->request_id;
  job.prompt.assign(seq->tokens.begin(), seq->tokens.begin() + seq->prompt_len);
  job.sampling = seq->sampling;
  job.target.pool = pool_;
  job.target.token = attempt->token;
  // Where the sender writes: the reserved blocks, or the staging blocks standing in for them.
  job.target.block_ids = attempt->inbound->block_ids();
  job.model_fingerprint = pool_.model_fingerprint;
  job.first_position = offload->cached_tokens;
  job.num_tokens = seq->prompt_len - offload->cached_tokens;
  attempt->deadline =
      std::min({offload->deadline, now + config_.attempt_timeout, offload->offload_cutoff});
  job.deadline = attempt->deadline;
  job.ttft_due = offload->budget.ttft_deadline;
  attempt->next_liveness = now + config_.liveness_interval;

  offload->current = attempt;
  attempts_[attempt->token] = attempt;
  std::shared_ptr<Poster> poster = poster_;
  attempt->inbound->OnDone(
      [this, poster, attempt] { poster->Post([this, attempt] { OnTransferDone(attempt); }); });
  poster->CallStarted();
  attempt->call = client_->Prefill(
      attempt->target, job, [this, poster, attempt](absl::StatusOr<PrefillResult> result) {
        poster->Post([this, attempt, result = std::move(result)]() mutable {
          OnCallDone(attempt, std::move(result));
        });
        poster->CallDone();
      });
}

void OffloadCoordinator::OnCallDone(const std::shared_ptr<Attempt>& attempt,
                                    absl::StatusOr<PrefillResult> result) {
  attempt->call_done = true;
  attempt->result = std::move(result);
  if (attempt->offload == nullptr) return;  // Already failed or cancelled; see quarantine.
  if (!attempt->result.ok()) {
    const absl::Status& status = attempt->result.status();
    PDS_LOG(WARNING) << attempt->request_id << ": prefill on " << attempt->target.worker_id
                     << " failed: " << status;
    const bool ttft =
        absl::IsDeadlineExceeded(status) && attempt->deadline == attempt->offload->offload_cutoff;
    AttemptFailed(attempt.get(), ttft ? "ttft_budget" : CauseOf(status),
                  !RefusedBeforeWriting(status.code()));
    return;
  }
  attempt->call_ok_at = clock_->Now();
  if (attempt->transfer_done) Complete(attempt.get());
}

void OffloadCoordinator::OnTransferDone(const std::shared_ptr<Attempt>& attempt) {
  attempt->transfer_done = true;
  if (attempt->offload == nullptr) return;
  if (const absl::Status s = attempt->inbound->status(); !s.ok()) {
    PDS_LOG(WARNING) << attempt->request_id << ": kv transfer from " << attempt->target.worker_id
                     << " failed: " << s;
    AttemptFailed(attempt.get(), "transfer_incomplete", true);
    return;
  }
  if (attempt->call_done && attempt->result.ok()) Complete(attempt.get());
}

void OffloadCoordinator::Complete(Attempt* attempt) {
  Offload* offload = attempt->offload;
  Sequence* seq = offload->seq;
  const PrefillResult& r = *attempt->result;
  transport_->Release(attempt->token);
  loop_->scheduler().blocks()->MarkReserved(attempt->blocks, false);
  attempt->offload = nullptr;
  const uint64_t token = attempt->token;
  OffloadOutcome& o = seq->offload;
  o.offloaded = true;
  o.prefill_worker_id = r.worker_id.empty() ? attempt->target.worker_id : r.worker_id;
  o.prefill = r.measured;
  seq->prefill_done = clock_->Now();
  loop_->ObserveKvWait(seq->prefill_done - seq->admitted);
  loop_->scheduler().TransferDone(seq, seq->prompt_len);
  seq->tokens.push_back(r.first_token);
  loop_->CountOffload(true, "");
  FinishOffload(seq);
  attempts_.erase(token);
  loop_->EmitToken(seq);  // May finish (and free) the sequence.
}

void OffloadCoordinator::AttemptFailed(Attempt* attempt, const std::string& cause,
                                       bool maybe_written) {
  Offload* offload = attempt->offload;
  Sequence* seq = offload->seq;
  attempt->offload = nullptr;
  offload->current.reset();
  seq->offload.fallback_cause = cause;
  std::shared_ptr<Attempt> keep = attempts_[attempt->token];
  attempts_.erase(attempt->token);
  if (!maybe_written) {
    // Refused before writing: the blocks are clean and stay with the sequence.
    transport_->Release(attempt->token);
    loop_->scheduler().blocks()->MarkReserved(attempt->blocks, false);
  } else {
    if (attempt->call) attempt->call->Cancel();
    if (!QuarantineAttempt(attempt)) {
      StartAttempt(offload);  // Staged and not landing: the sequence's blocks are clean.
      return;
    }
    // The sequence needs fresh blocks where the quarantined ones were.
    const int bs = pool_.layout.block_size;
    const int first_block = offload->cached_tokens / bs;
    std::vector<int32_t> fresh;
    if (!loop_->scheduler().blocks()->Allocate(static_cast<int>(attempt->blocks.size()), &fresh)) {
      // No room now: it waits and is admitted again locally.
      seq->block_table.erase(
          seq->block_table.begin() + first_block,
          seq->block_table.begin() + first_block + static_cast<long>(attempt->blocks.size()));
      loop_->scheduler().ReturnToWaiting(seq);
      MarkFellBack(seq, cause);
      FinishOffload(seq);
      return;
    }
    std::copy(fresh.begin(), fresh.end(), seq->block_table.begin() + first_block);
  }
  StartAttempt(offload);
}

void OffloadCoordinator::FallBackToLocal(Offload* offload, const std::string& cause) {
  Sequence* seq = offload->seq;
  PDS_LOG(INFO) << seq->request_id << ": prefilling locally (" << cause << ")";
  seq->offload.fallback_cause = cause;
  MarkFellBack(seq, cause);
  // Its blocks (prefix hits plus fresh ones) stay; the suffix is computed in local chunks.
  loop_->scheduler().TransferDone(seq, offload->cached_tokens);
  FinishOffload(seq);
}

void OffloadCoordinator::MarkFellBack(Sequence* seq, const std::string& cause) {
  const absl::Time now = clock_->Now();
  seq->offload.fell_back_to_local = true;
  seq->offload.fell_back_at = now;
  seq->offload.offload_wait_ms = absl::ToDoubleMilliseconds(now - seq->admitted);
  loop_->CountOffload(false, cause);
  loop_->ObserveKvWait(now - seq->admitted);
}

void OffloadCoordinator::FinishOffload(Sequence* seq) { offloads_.erase(seq); }

void OffloadCoordinator::EndAwaitingKv(Sequence* seq, EngineLoop::AwaitingKvEnd how) {
  auto end = [&] {
    if (how == EngineLoop::AwaitingKvEnd::kHandBack) {
      loop_->HandBackSequence(seq);
    } else {
      loop_->FinishSequence(seq, text::FinishReason::kCancelled);
    }
  };
  auto it = offloads_.find(seq);
  if (it == offloads_.end()) {
    end();
    return;
  }
  Offload* offload = it->second.get();
  if (std::shared_ptr<Attempt> attempt = offload->current) {
    attempt->offload = nullptr;
    attempts_.erase(attempt->token);
    if (attempt->call) attempt->call->Cancel();
    // Freed once the prefill worker says it stopped.
    if (QuarantineAttempt(attempt.get())) {
      // The quarantine holds those blocks now; the sequence releases only the rest.
      std::vector<int32_t>& table = seq->block_table;
      table.erase(std::remove_if(table.begin(), table.end(),
                                 [&](int32_t b) {
                                   return std::find(attempt->blocks.begin(), attempt->blocks.end(),
                                                    b) != attempt->blocks.end();
                                 }),
                  table.end());
    }
  }
  FinishOffload(seq);
  end();
}

bool OffloadCoordinator::QuarantineAttempt(Attempt* attempt) {
  // Data for the token that arrives from now on is rejected by the transport; one-sided puts
  // cannot be rejected, hence the quarantine until the writer acknowledges.
  transport_->Release(attempt->token);
  kvcache::BlockManager* blocks = loop_->scheduler().blocks();
  auto q = std::make_shared<Quarantine>();
  const bool pool_blocks = attempt->inbound->ExpectedBlocksMayBeWritten();
  if (pool_blocks) {
    blocks->Quarantine(attempt->blocks);
    q->blocks = attempt->blocks;
  } else {
    // The writer targets the transport's staging blocks (held with the inbound transfer) and
    // no landing copy runs: the sequence's blocks are clean.
    blocks->MarkReserved(attempt->blocks, false);
  }
  q->target = attempt->target;
  q->token = attempt->token;
  q->inbound = attempt->inbound;
  q->since = clock_->Now();
  q->writer_deadline = attempt->deadline;
  quarantine_[q->token] = q;
  SendCancel(q);
  return pool_blocks;
}

void OffloadCoordinator::SendCancel(const std::shared_ptr<Quarantine>& q) {
  q->next_try = absl::Time();
  std::shared_ptr<Poster> poster = poster_;
  poster->CallStarted();
  q->cancel_call = client_->CancelPrefill(
      q->target, q->token, clock_->Now() + std::max(config_.cancel_retry, absl::Seconds(1)),
      [this, poster, q](absl::StatusOr<bool> writes_stopped) {
        poster->Post([this, q, writes_stopped = std::move(writes_stopped)] {
          OnCancelDone(q, writes_stopped);
        });
        poster->CallDone();
      });
}

void OffloadCoordinator::OnCancelDone(const std::shared_ptr<Quarantine>& q,
                                      const absl::StatusOr<bool>& writes_stopped) {
  if (!quarantine_.contains(q->token)) return;
  const absl::Time now = clock_->Now();
  if (writes_stopped.ok() && *writes_stopped) {
    q->stopped = true;
    if (q->inbound->writes_in_flight() == 0) Release(q.get(), "writer stopped");
    return;  // Receiver-side copies still running: Tick() releases once they end.
  }
  const absl::Status status =
      writes_stopped.ok() ? absl::UnknownError("writes not stopped yet") : writes_stopped.status();
  if (q->unreachable_since == absl::Time()) q->unreachable_since = now;
  // Refused connections mean the process is gone. A worker that accepts but does not answer
  // may only be stopped, and may write again when it continues, until its deadline.
  const bool gone = absl::IsUnavailable(status);
  const bool dead = gone ? now - q->unreachable_since >= config_.dead_after
                         : now >= q->writer_deadline + config_.dead_after;
  if (dead && q->inbound->writes_in_flight() == 0) {
    PDS_LOG(WARNING) << "prefill worker " << q->target.worker_id << " unreachable for "
                     << absl::FormatDuration(now - q->unreachable_since) << " (" << status
                     << (gone ? "): taking it as dead" : "): past its writing deadline")
                     << "; freeing " << q->blocks.size() << " quarantined blocks";
    Release(q.get(), "writer dead");
    return;
  }
  q->next_try = now + config_.cancel_retry;
}

void OffloadCoordinator::Release(Quarantine* q, const char* why) {
  PDS_LOG(DEBUG) << "kv transfer " << q->token << ": " << why << ", releasing " << q->blocks.size()
                 << " blocks";
  loop_->scheduler().blocks()->Unquarantine(q->blocks);
  quarantine_.erase(q->token);  // Staging blocks go back with the last hold on the transfer.
}

bool OffloadCoordinator::Tick() {
  if (attempts_.empty() && quarantine_.empty()) return false;
  const absl::Time now = clock_->Now();
  std::vector<Attempt*> late;
  for (auto& [token, attempt] : attempts_) {
    if (attempt->offload != nullptr && attempt->call_done && attempt->result.ok() &&
        !attempt->transfer_done && now - attempt->call_ok_at > config_.completion_timeout) {
      late.push_back(attempt.get());
    }
  }
  for (Attempt* attempt : late) {
    PDS_LOG(WARNING) << attempt->request_id << ": prefill on " << attempt->target.worker_id
                     << " answered but its kv transfer did not complete within "
                     << absl::FormatDuration(config_.completion_timeout);
    AttemptFailed(attempt, "transfer_incomplete", true);
  }
  // A call unanswered at its attempt's deadline has failed (gRPC's deadline says so on the
  // real clock too; this holds on the injected one and whatever the client does).
  std::vector<Attempt*> expired;
  for (auto& [token, attempt] : attempts_) {
    if (attempt->offload != nullptr && !attempt->call_done && now >= attempt->deadline) {
      expired.push_back(attempt.get());
    }
  }
  for (Attempt* attempt : expired) {
    // Cut by the request's TTFT budget rather than by the attempt timeout or its deadline.
    const bool ttft = attempt->deadline == attempt->offload->offload_cutoff;
    PDS_LOG(WARNING) << attempt->request_id << ": prefill on " << attempt->target.worker_id
                     << " did not answer by its attempt's deadline"
                     << (ttft ? " (the request's TTFT budget)" : "") << "; moving on";
    AttemptFailed(attempt, ttft ? "ttft_budget" : "prefill_deadline", true);
  }
  std::vector<std::shared_ptr<Attempt>> check;
  for (auto& [token, attempt] : attempts_) {
    if (attempt->offload != nullptr && !attempt->call_done &&
        attempt->next_liveness != absl::Time() && now >= attempt->next_liveness) {
      check.push_back(attempt);
    }
  }
  for (const auto& attempt : check) SendLivenessCheck(attempt);
  std::vector<std::shared_ptr<Quarantine>> due;
  for (auto& [token, q] : quarantine_) due.push_back(q);
  for (const auto& q : due) {
    if (q->stopped) {
      if (q->inbound->writes_in_flight() == 0) Release(q.get(), "writer stopped");
    } else if (q->next_try != absl::Time() && now >= q->next_try) {
      SendCancel(q);
    }
  }
  return !attempts_.empty() || !quarantine_.empty();
}

}  // namespace pdserve::decode
