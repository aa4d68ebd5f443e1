#include "router/relay_call.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/hand_back.h"
#include "common/logging.h"
#include "common/retry_after.h"
#include "router/learning.h"
#include "router/request_errors.h"
#include "router/router_wire.h"

namespace pdserve::router {
namespace {

// gRPC tells a server only that a call was cancelled, and a client whose deadline passes
// cancels it too. The server's copy of the deadline starts when it read the request, a little
// after the client sent it, so the client's cancellation can arrive just before it: one this
// close to the deadline counts as the deadline passing (a client cancelling on its own this
// late is counted as a deadline too).
constexpr absl::Duration kDeadlineSlack = absl::Milliseconds(100);

bool DeadlineReached(const grpc::CallbackServerContext& context) {
  return absl::FromChrono(context.deadline()) - absl::Now() <= kDeadlineSlack;
}

}  // namespace

// The downstream Decode.Generate call.
//
// Reads are started outside reactions (after the client took the previous message), so the
// call holds one gRPC hold from Begin() until the relay knows it reads no more: without it,
// gRPC may finish the call (OnDone, the reader freed) between a message and the next
// StartRead, which then runs on a dead reader ("pure virtual method called"). The hold is
// dropped exactly once: when a read ends the stream, or by StopReading() when the relay
// decides not to read again after a message.
class RelayCall::Downstream final : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  explicit Downstream(RelayCall* call) : call_(call) {}
  void Begin(v1::Decode::Stub* stub) {
    stub->async()->Generate(&context, &request, this);
    AddHold();
    StartRead(&in);
    StartCall();
  }
  // Only after OnMessage, while the hold is held.
  void ReadNext() { StartRead(&in); }
  // Only after OnMessage, instead of ReadNext.
  void StopReading() { RemoveHold(); }
  void OnReadDone(bool ok) override {
    if (ok) {
      call_->OnMessage();  // The relay answers with ReadNext() or StopReading().
    } else {
      RemoveHold();  // The stream ended: OnDone follows.
    }
  }
  void OnDone(const grpc::Status& status) override { call_->OnDownstreamDone(status); }

  grpc::ClientContext context;
  v1::DecodeRequest request;
  v1::GenerateResponse in;

 private:
  RelayCall* const call_;
};

// Registered with the worker registry while the call runs on one decode worker; detached
// when the call is placed again and before it is deleted, so a late removal reaches neither
// the next placement nor a dead call.
class RelayCall::Listener final : public WorkerListener {
 public:
  explicit Listener(RelayCall* call) : call_(call) {}
  void Interrupted(Interruption why, const std::string& message) override {
    RelayCall* call;
    {
      absl::MutexLock lock(&mu_);
      call = call_;
      if (call == nullptr) return;
      absl::MutexLock call_lock(&call->mu_);
      ++call->busy_;  // Keeps the call alive once this lock is released.
    }
    call->OnInterrupted(this, why, message);
  }
  void Detach() {
    absl::MutexLock lock(&mu_);
    call_ = nullptr;
  }

 private:
  absl::Mutex mu_;
  RelayCall* call_ ABSL_GUARDED_BY(mu_);
};

RelayCall* RelayCall::Create(const RelayDeps& deps, grpc::CallbackServerContext* context,
                             const CatalogModel* model, absl::Time arrival,
                             ClientAdmission::Ticket client) {
  return new RelayCall(deps, context, model, arrival, std::move(client));
}

RelayCall::RelayCall(const RelayDeps& deps, grpc::CallbackServerContext* context,
                     const CatalogModel* model, absl::Time arrival, ClientAdmission::Ticket client)
    : deps_(deps), context_(context), arrival_(arrival) {
  absl::MutexLock lock(&mu_);
  client_ = std::move(client);
  placement_request_.model = model;
}

void RelayCall::Begin(v1::GenerateRequest request, std::vector<int32_t> prompt,
                      PlacementRequest placement_request) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    request_ = std::move(request);
    prompt_ = std::move(prompt);
    placement_request_ = std::move(placement_request);
    placement_request_.prompt = &prompt_;
    if (cancelled_) {
      FinishLocked(ClientGoneStatusLocked(), &actions);
    } else {
      PlaceLocked(&actions);
    }
  }
  Act(actions);  // Drops the hold taken at creation.
}

void RelayCall::Fail(const absl::Status& status) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    FinishLocked(ToGrpcWithRetryAfter(status, context_), &actions);
  }
  Act(actions);  // Drops the hold taken at creation.
}

RelayCall::~RelayCall() = default;

void RelayCall::PlaceLocked(Actions* actions) {
  while (true) {
    auto placed = deps_.placer->Place(placement_request_);
    if (!placed.ok()) {
      FinishLocked(ToGrpcWithRetryAfter(placed.status(), context_), actions);
      return;
    }
    placement_ = *std::move(placed);
    placed_ = true;
    router_ms_ = absl::ToDoubleMilliseconds(absl::Now() - arrival_);
    if (!listener_) listener_ = std::make_shared<Listener>(this);
    lease_ = deps_.registry->Acquire(
        placement_.decode_session, listener_,
        placement_request_.slo.has_value() ? placement_request_.slo->tpot_ms : 0,
        placement_request_.max_tokens);
    if (lease_ != 0) break;
    // The worker left between placement and now: place again without it.
    placement_request_.exclude.push_back(placement_.placement.decode.worker_id);
  }
  auto downstream = std::make_unique<Downstream>(this);
  v1::DecodeRequest& r = downstream->request;
  *r.mutable_request() = request_;
  PlacementToProto(placement_.placement, r.mutable_placement());
  if (placement_.placement.offload) {
    for (const WorkerRef& ref : placement_.placement.prefill) {
      v1::PrefillWorkerRef* out = r.add_prefill_workers();
      out->set_worker_id(ref.worker_id);
      out->set_address(ref.address);
    }
  }
  r.set_arrival_unix_nanos(absl::ToUnixNanos(arrival_));
  r.set_client(client_.client());
  downstream->context.set_deadline(context_->deadline());
  downstream_done_ = false;
  downstream_ = downstream.get();
  all_downstreams_.push_back(std::move(downstream));
  actions->begin = downstream_;
  actions->stub = deps_.stub(placement_.placement.decode.address);
}

void RelayCall::OnMessage() {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    ++busy_;
    ++messages_;
    v1::GenerateResponse& in = downstream_->in;
    const absl::Time now = absl::Now();
    const std::string& model = placement_request_.model->name;
    if (in.token_ids_size() > 0) {
      if (first_token_ == absl::Time()) {
        first_token_ = now;
        const bool offloaded = placement_.placement.offload;
        deps_.metrics->Ttft(model, offloaded ? "offload" : "local")
            .Observe(absl::ToDoubleSeconds(now - arrival_));
      } else {
        deps_.metrics->Itl(model, placement_.placement.offload ? "offload" : "local")
            .Observe(absl::ToDoubleSeconds(now - last_token_));
      }
      last_token_ = now;
    }
    if (in.has_result()) {
      in.mutable_result()->mutable_timings()->set_router_ms(router_ms_);
      ObserveResult(in.result());
    }
    if (!finished_ && !cancelled_) {
      bool own_buffer = false;
      out_.Clear();  // The serializer writes into an empty buffer only.
      const grpc::Status serialized =
          grpc::SerializationTraits<v1::GenerateResponse>::Serialize(in, &out_, &own_buffer);
      if (!serialized.ok())
        PDS_LOG(ERROR) << "serializing a response: " << serialized.error_message();
      writing_ = true;
      actions.write = true;  // OnWriteDone reads the next message or stops reading.
    } else {
      actions.stop_reading = downstream_;
    }
  }
  Act(actions);
}

void RelayCall::ObserveResult(const v1::GenerateResult& result) {
  const v1::Placement& p = result.placement();
  const v1::StageTimings& t = result.timings();
  const bool offloaded = p.mode() == v1::PLACEMENT_MODE_OFFLOAD && !p.fell_back_to_local();
  if (p.fell_back_to_local()) deps_.metrics->fallbacks_seen.Increment();
  if (placement_request_.slo.has_value()) {
    // The class is one of the router's (checked on arrival): a bounded label.
    const std::string& slo_class = request_.objectives().slo_class();
    if (t.ttft_ms() > 0) {
      deps_.metrics->Objective(slo_class, "ttft", t.ttft_ms() <= placement_request_.slo->ttft_ms)
          .Increment();
    }
    const uint64_t tokens = result.usage().completion_tokens();
    if (tokens > 1) {
      const double tpot_ms = t.decode_ms() / static_cast<double>(tokens - 1);
      deps_.metrics->Objective(slo_class, "tpot", tpot_ms <= placement_request_.slo->tpot_ms)
          .Increment();
    }
  }
  if (placement_.predicted_ttft_ms > 0 && t.ttft_ms() > 0) {
    deps_.metrics->TtftPrediction(offloaded ? "offload" : "local")
        .Observe(t.ttft_ms() / placement_.predicted_ttft_ms);
  }
  if (offloaded) {
    LearnFromOffload(PrefillOutcomeOf(result, placement_.fingerprint), ForLearning(placement_),
                     deps_.cost_model);
  }
}

void RelayCall::OnWriteDone(bool ok) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    ++busy_;
    writing_ = false;
    if (pending_finish_) {
      FinishLocked(pending_status_, &actions);
    } else if (!ok) {  // The client went away.
      cancelled_ = true;
      deadline_passed_ = DeadlineReached(*context_);
      actions.cancel = downstream_;
      actions.stop_reading = downstream_;
    } else if (!finished_ && !cancelled_) {
      actions.read = downstream_;
    } else {
      actions.stop_reading = downstream_;
    }
  }
  Act(actions);
}

void RelayCall::OnDownstreamDone(const grpc::Status& status) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    ++busy_;
    downstream_done_ = true;
    ReleaseLeaseLocked();
    if (!finished_) {
      grpc::Status s = status;
      bool retried = false;
      const bool interrupted = interrupted_.has_value() && !status.ok();
      // Whichever the router saw first, the worker's stream failing or the registry dropping
      // the worker, a request with nothing produced yet may go elsewhere; a drain may not.
      const bool worker_gone = interrupted ? interrupted_->why == Interruption::kWorkerLeft
                                           : status.error_code() == grpc::StatusCode::UNAVAILABLE;
      // A decode worker leaving the decode role handed it back before its first token
      // (common/hand_back.h): placed again, elsewhere, without using the failure's retry.
      const bool handed_back =
          status.error_code() == grpc::StatusCode::UNAVAILABLE && messages_ == 0 &&
          downstream_->context.GetServerTrailingMetadata().count(kHandedBackTrailer) > 0;
      if (cancelled_) {
        s = ClientGoneStatusLocked();
      } else if (handed_back && handed_back_ < kMaxHandBacks) {
        ++handed_back_;
        retried = true;
        PDS_LOG(INFO) << request_.request_id() << ": handed back by decode worker "
                      << placement_.placement.decode.worker_id << "; placing again";
        deps_.metrics->requests_handed_back.Increment();
        placement_request_.exclude.push_back(placement_.placement.decode.worker_id);
        interrupted_.reset();
        actions.detach = std::move(listener_);
        PlaceLocked(&actions);
      } else if (worker_gone && messages_ == 0 && retries_ < 1) {
        // It failed before producing anything: place once more, elsewhere.
        ++retries_;
        retried = true;
        PDS_LOG(WARNING) << request_.request_id() << ": decode worker "
                         << placement_.placement.decode.worker_id << " unavailable ("
                         << (interrupted ? interrupted_->message : status.error_message())
                         << "); placing again";
        placement_request_.exclude.push_back(placement_.placement.decode.worker_id);
        interrupted_.reset();
        actions.detach = std::move(listener_);  // Late news of the old worker goes nowhere.
        PlaceLocked(&actions);
      } else if (interrupted) {
        s = grpc::Status(grpc::StatusCode::UNAVAILABLE, interrupted_->message);
      }
      if (!retried && s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        // The decode worker's retry-after hint travels on to the client.
        const auto& trailers = downstream_->context.GetServerTrailingMetadata();
        if (auto it = trailers.find(kRetryAfterTrailer); it != trailers.end()) {
          context_->AddTrailingMetadata(kRetryAfterTrailer,
                                        std::string(it->second.data(), it->second.size()));
        }
      }
      if (!retried) {
        if (writing_) {
          pending_finish_ = true;
          pending_status_ = s;
        } else {
          FinishLocked(s, &actions);
        }
      }
    }
  }
  Act(actions);
}

void RelayCall::OnInterrupted(const Listener* from, Interruption why, const std::string& message) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    // News of a worker the call has already left (told after the call placed itself again,
    // before that placement's listener was detached) is not about the current placement.
    if (from == listener_.get()) {
      interrupted_ = Interrupt{why, message};
      if (downstream_ != nullptr && !downstream_done_) actions.cancel = downstream_;
    }
  }
  Act(actions);  // Drops the hold the listener took.
}

grpc::Status RelayCall::ClientGoneStatusLocked() const {
  if (deadline_passed_) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the request's deadline passed");
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the request");
}

void RelayCall::OnCancel() {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    ++busy_;
    cancelled_ = true;
    // gRPC cancels a call whose deadline passed too: tell the two apart for the metrics.
    deadline_passed_ = DeadlineReached(*context_);
    if (downstream_ != nullptr && !downstream_done_) actions.cancel = downstream_;
  }
  Act(actions);
}

void RelayCall::OnDone() {
  {
    absl::MutexLock lock(&mu_);
    ++busy_;
    server_done_ = true;
  }
  Act(Actions());
}

void RelayCall::Act(const Actions& a) {
  if (a.cancel != nullptr) a.cancel->context.TryCancel();
  if (a.begin != nullptr) a.begin->Begin(a.stub);
  if (a.write) StartWrite(&out_);
  if (a.read != nullptr) {
    if (deps_.testing_read_delay > absl::ZeroDuration()) {
      // Off gRPC's threads (a reaction must not block). The call lives until the read is
      // started: its downstream cannot finish while it holds the read hold.
      std::thread([read = a.read, delay = deps_.testing_read_delay] {
        absl::SleepFor(delay);
        read->ReadNext();
      }).detach();
    } else {
      a.read->ReadNext();
    }
  }
  if (a.stop_reading != nullptr) a.stop_reading->StopReading();
  if (a.finish) Finish(a.status);
  if (a.detach) a.detach->Detach();
  std::shared_ptr<Listener> listener;
  {
    absl::MutexLock lock(&mu_);
    --busy_;
    if (busy_ > 0 || !server_done_ || !downstream_done_ || deleting_) return;
    deleting_ = true;
    listener = std::move(listener_);
  }
  if (listener) listener->Detach();
  delete this;
}

void RelayCall::ReleaseLeaseLocked() {
  if (lease_ != 0) deps_.registry->Release(placement_.decode_session, lease_);
  lease_ = 0;
}

void RelayCall::FinishLocked(const grpc::Status& status, Actions* actions) {
  if (finished_) return;
  finished_ = true;
  pending_finish_ = false;
  const std::string& model = placement_request_.model->name;
  RecordOutcome(*deps_.metrics, model, status);
  const char* mode = !placed_ ? "unplaced" : placement_.placement.offload ? "offload" : "local";
  deps_.metrics->E2e(model, mode).Observe(absl::ToDoubleSeconds(absl::Now() - arrival_));
  if (deps_.on_finish) deps_.on_finish();
  client_.Release();
  actions->finish = true;
  actions->status = status;
}

}  // namespace pdserve::router
