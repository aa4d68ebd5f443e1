#include "decode_worker/decode_service.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/hand_back.h"
#include "common/logging.h"

namespace pdserve::decode {
namespace {

// A client's name is the router's (bounded there); this bounds what a direct caller sends.
constexpr size_t kMaxClientBytes = 128;

// A reactor that fails the call at once (validation errors, overload).
class ErrorReactor final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  explicit ErrorReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

// The shared state between the engine loop (which pushes) and the stream's reactor (which
// writes). Lives as long as either holds it; the reactor detaches in OnDone.
class GrpcStreamSink final : public StreamSink {
 public:
  class Reactor final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
   public:
    // `open` counts the service's calls not yet done; the reactor is one of them until
    // OnDone.
    Reactor(std::shared_ptr<GrpcStreamSink> sink, grpc::CallbackServerContext* context,
            std::atomic<int>* open)
        : sink_(std::move(sink)), context_(context), open_(open) {
      open_->fetch_add(1);
    }
    void OnWriteDone(bool ok) override { sink_->OnWriteDone(ok); }
    void HandBack(const std::string& why) {
      context_->AddTrailingMetadata(kHandedBackTrailer, "1");
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, why));
    }
    void OnCancel() override { sink_->OnCancel(); }
    void OnDone() override {
      sink_->Detach();
      open_->fetch_sub(1);
      delete this;
    }

   private:
    std::shared_ptr<GrpcStreamSink> sink_;
    grpc::CallbackServerContext* context_;  // The call's: valid until OnDone.
    std::atomic<int>* open_;
  };

  GrpcStreamSink(std::string request_id, v1::Placement placement, std::function<void()> notify)
      : request_id_(std::move(request_id)),
        placement_(std::move(placement)),
        notify_(std::move(notify)) {}

  void Attach(Reactor* reactor) {
    absl::MutexLock lock(&mu_);
    reactor_ = reactor;
  }

  void PushTokens(const std::vector<int32_t>& ids, const std::string& text,
                  int64_t unix_nanos) override {
    Op op;
    {
      absl::MutexLock lock(&mu_);
      for (int32_t id : ids) pending_.add_token_ids(static_cast<uint32_t>(id));
      pending_.mutable_text()->append(text);
      pending_.set_time_unix_nanos(unix_nanos);
      has_pending_ = true;
      op = PlanLocked();
    }
    Run(op);
  }

  void Finish(const Final& f) override {
    Op op;
    {
      absl::MutexLock lock(&mu_);
      v1::GenerateResult& r = final_;
      r.set_finish_reason(
          wire::FinishReasonToProto(static_cast<text::FinishReason>(f.finish_reason)));
      r.set_stop_reason(f.stop_reason);
      r.set_error_message(f.error_message);
      r.mutable_usage()->set_prompt_tokens(f.prompt_tokens);
      r.mutable_usage()->set_cached_prompt_tokens(f.cached_prompt_tokens);
      r.mutable_usage()->set_completion_tokens(f.completion_tokens);
      v1::StageTimings& t = *r.mutable_timings();
      t.set_queue_ms(f.queue_ms);
      t.set_prefill_ms(f.prefill_ms);
      t.set_transfer_ms(f.offload.transfer_ms);
      t.set_transfer_tail_ms(f.offload.transfer_tail_ms);
      t.set_prefill_queue_ms(f.offload.queue_ms);
      t.set_offload_wait_ms(f.offload_wait_ms);
      t.set_ttft_ms(f.ttft_ms);
      t.set_decode_ms(f.decode_ms);
      t.set_e2e_ms(f.e2e_ms);
      *r.mutable_placement() = placement_;
      if (f.offloaded) {
        r.mutable_placement()->set_mode(v1::PLACEMENT_MODE_OFFLOAD);
        r.mutable_placement()->set_prefill_worker_id(f.prefill_worker_id);
        r.mutable_placement()->set_transfer_bytes(f.offload.transfer_bytes);
        r.mutable_placement()->set_prefill_computed_tokens(
            static_cast<uint32_t>(f.offload.computed_tokens));
        r.mutable_placement()->set_prefill_batch_tokens(
            static_cast<uint64_t>(std::max<int64_t>(0, f.offload.batch_tokens)));
        r.mutable_placement()->set_prefill_batch_token_squares(f.offload.batch_token_squares);
      }
      if (f.fell_back_to_local) {
        r.mutable_placement()->set_fell_back_to_local(true);
        r.mutable_placement()->set_fallback_cause(f.fallback_cause);
      }
      final_ready_ = true;
      op = PlanLocked();
    }
    Run(op);
  }

  void HandBack(const std::string& why) override {
    Op op;
    {
      absl::MutexLock lock(&mu_);
      hand_back_ = why;
      op = PlanLocked();
    }
    Run(op);
  }

  int pending_tokens() const override {
    absl::MutexLock lock(&mu_);
    return pending_.token_ids_size();
  }
  bool cancelled() const override { return cancelled_.load(); }

 private:
  // A gRPC operation decided under the lock and started after releasing it (its reaction
  // may run inline and take the lock).
  struct Op {
    enum Kind { kNone, kWrite, kWriteAndFinish, kFinishCancelled, kFinishHandedBack } kind = kNone;
    Reactor* reactor = nullptr;
    std::string message;  // kFinishHandedBack's.
  };

  Op PlanLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Op op;
    if (reactor_ == nullptr || writing_ || finished_) return op;
    if (broken_) {  // The client is gone: end the call so that the reactor completes.
      finished_ = true;
      op.kind = Op::kFinishCancelled;
      op.reactor = reactor_;
      return op;
    }
    if (hand_back_.has_value()) {  // Nothing was pushed (HandBack's contract).
      finished_ = true;
      op.kind = Op::kFinishHandedBack;
      op.reactor = reactor_;
      op.message = *hand_back_;
      return op;
    }
    if (!has_pending_ && !final_ready_) return op;
    in_flight_.Clear();
    in_flight_.Swap(&pending_);
    in_flight_.set_request_id(request_id_);
    has_pending_ = false;
    op.reactor = reactor_;
    if (final_ready_) {
      *in_flight_.mutable_result() = final_;
      finished_ = true;
      op.kind = Op::kWriteAndFinish;
      return op;
    }
    writing_ = true;
    op.kind = Op::kWrite;
    return op;
  }

  void Run(const Op& op) {
    switch (op.kind) {
      case Op::kNone:
        return;
      case Op::kWrite:
        op.reactor->StartWrite(&in_flight_);
        return;
      case Op::kWriteAndFinish:
        op.reactor->StartWriteAndFinish(&in_flight_, grpc::WriteOptions(), grpc::Status::OK);
        return;
      case Op::kFinishCancelled:
        op.reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
        return;
      case Op::kFinishHandedBack:
        op.reactor->HandBack(op.message);
        return;
    }
  }

  void OnWriteDone(bool ok) {
    Op op;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) {
        broken_ = true;
        cancelled_.store(true);
      }
      op = PlanLocked();
    }
    Run(op);
    if (!ok) notify_();
  }
  void OnCancel() {
    Op op;
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
      cancelled_.store(true);
      op = PlanLocked();
    }
    Run(op);
    notify_();
  }
  void Detach() {
    absl::MutexLock lock(&mu_);
    reactor_ = nullptr;
  }

  const std::string request_id_;
  const v1::Placement placement_;
  std::function<void()> notify_;
  mutable absl::Mutex mu_;
  Reactor* reactor_ ABSL_GUARDED_BY(mu_) = nullptr;
  v1::GenerateResponse pending_ ABSL_GUARDED_BY(mu_);
  // The message being written: filled under the lock, then owned by the one write in flight.
  v1::GenerateResponse in_flight_;
  v1::GenerateResult final_ ABSL_GUARDED_BY(mu_);
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool final_ready_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // Cancelled or a write failed: no more writes.
  std::optional<std::string> hand_back_ ABSL_GUARDED_BY(mu_);  // HandBack's message.
  std::atomic<bool> cancelled_{false};
};

DecodeService::DecodeService(EngineLoop* loop, const text::Tokenizer* tokenizer,
                             DecodeServiceOptions options, Clock* clock, DecodeMetrics* metrics)
    : loop_(loop),
      tokenizer_(tokenizer),
      options_(std::move(options)),
      clock_(clock),
      metrics_(metrics) {
  worker_id_ = options_.worker_id;
}

void DecodeService::SetWorkerId(const std::string& id) {
  absl::MutexLock lock(&id_mu_);
  worker_id_ = id;
}

std::unique_ptr<Sequence> DecodeService::MakeSequence(const wire::ValidatedRequest& r,
                                                      absl::Time arrival,
                                                      std::shared_ptr<StreamSink> sink) const {
  auto seq = std::make_unique<Sequence>();
  seq->request_id = r.request_id;
  seq->priority = r.priority;
  seq->arrival = arrival;
  seq->tokens = r.prompt;
  seq->prompt_len = static_cast<int>(r.prompt.size());
  seq->sampling = r.sampling;
  seq->stream =
      std::make_unique<text::GenerationStream>(tokenizer_, r.sampling, options_.eos_token_ids);
  seq->sink = std::move(sink);
  return seq;
}

grpc::ServerWriteReactor<v1::GenerateResponse>* DecodeService::Generate(
    grpc::CallbackServerContext* context, const v1::DecodeRequest* request) {
  const absl::Time now = clock_->Now();
  auto validated = wire::ValidateGenerateRequest(request->request(), options_.limits, tokenizer_);
  if (!validated.ok()) {
    metrics_->requests_rejected.Increment();
    return new ErrorReactor(wire::ToGrpc(validated.status()));
  }
  v1::Placement placement = request->placement();
  {
    absl::MutexLock lock(&id_mu_);
    placement.set_decode_worker_id(worker_id_);
  }
  if (placement.mode() == v1::PLACEMENT_MODE_UNSPECIFIED) {
    placement.set_mode(request->prefill_workers().empty() ? v1::PLACEMENT_MODE_LOCAL
                                                          : v1::PLACEMENT_MODE_OFFLOAD);
  }
  if (placement.reason().empty()) placement.set_reason("direct");
  auto sink = std::make_shared<GrpcStreamSink>(validated->request_id, placement,
                                               [loop = loop_] { loop->Notify(); });
  auto* reactor = new GrpcStreamSink::Reactor(sink, context, &open_streams_);
  sink->Attach(reactor);
  const absl::Time arrival =
      request->arrival_unix_nanos() > 0 ? absl::FromUnixNanos(request->arrival_unix_nanos()) : now;
  std::unique_ptr<Sequence> seq = MakeSequence(*validated, arrival, sink);
  seq->client = request->client().substr(0, kMaxClientBytes);
  absl::Status status;
  if (!request->prefill_workers().empty() && offload_) {
    std::vector<PrefillTarget> targets;
    for (const v1::PrefillWorkerRef& ref : request->prefill_workers()) {
      targets.push_back(PrefillTarget{ref.worker_id(), ref.address()});
    }
    OffloadBudget budget;
    budget.deadline = absl::FromChrono(context->deadline());
    if (const double ttft_ms = request->request().objectives().ttft_ms(); ttft_ms > 0) {
      budget.ttft_deadline = arrival + absl::Milliseconds(ttft_ms);
    }
    budget.predicted = absl::Milliseconds(std::max(0.0, placement.predicted_offload_cost_ms()));
    status = offload_(std::move(seq), std::move(targets), budget);
  } else {
    if (!request->prefill_workers().empty()) {
      // Asked to offload, but this worker serves no KV transport (--kv_transport=none).
      seq->offload.fell_back_to_local = true;
      seq->offload.fallback_cause = "no_transport";
      loop_->CountOffload(false, "no_transport");
    }
    status = loop_->Submit(std::move(seq));
  }
  if (!status.ok()) {
    metrics_->requests_rejected.Increment();
    sink->Attach(nullptr);
    reactor->Finish(wire::ToGrpc(status, context));
  }
  return reactor;
}

grpc::ServerUnaryReactor* DecodeService::GetStats(grpc::CallbackServerContext* context,
                                                  const v1::GetStatsRequest*,
                                                  v1::DecodeStats* out) {
  const WorkerStats s = loop_->Stats();
  {
    absl::MutexLock lock(&id_mu_);
    out->set_worker_id(worker_id_);
  }
  out->set_epoch(options_.epoch);
  v1::BlockAccounting* b = out->mutable_blocks();
  b->set_total(s.blocks.total);
  b->set_free(s.blocks.free);
  b->set_cached(s.blocks.cached);
  b->set_in_use(s.blocks.in_use);
  b->set_reserved_for_transfer(s.blocks.reserved);
  b->set_quarantined(s.blocks.quarantined);
  out->set_running(s.running);
  out->set_waiting(s.waiting);
  out->set_awaiting_kv(s.awaiting_kv);
  out->set_steps_total(s.counters.steps);
  out->set_mixed_steps_total(s.counters.mixed_steps);
  out->set_prefill_tokens_total(s.counters.prefill_tokens);
  out->set_decode_tokens_total(s.counters.decode_tokens);
  out->set_preemptions_total(s.counters.preemptions);
  out->set_prefix_cache_queried_tokens_total(s.counters.prefix_queried_tokens);
  out->set_prefix_cache_hit_tokens_total(s.counters.prefix_hit_tokens);
  out->set_offload_fallbacks_total(s.offload_fallbacks);
  out->set_offload_completions_total(s.offload_completions);
  out->set_requests_finished_total(s.requests_finished);
  out->set_prefill_chunks_total(s.counters.prefill_chunks);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace pdserve::decode
