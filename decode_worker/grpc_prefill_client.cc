#include "decode_worker/grpc_prefill_client.h"

#include <algorithm>

#include "common/logging.h"
#include "server/grpc_channel.h"
#include "wire/report_bridge.h"
#include "wire/request_bridge.h"

namespace pdserve::decode {

// One RPC's state: its context (which Cancel() reaches) and its messages. Shared by the
// caller's handle and gRPC's completion callback, so it lives until both let go.
class GrpcPrefillClient::Call : public PendingCall {
 public:
  void Cancel() override { context.TryCancel(); }
  grpc::ClientContext context;
};

GrpcPrefillClient::~GrpcPrefillClient() {
  absl::MutexLock lock(&mu_);
  for (auto& [key, weak] : in_flight_) {
    if (std::shared_ptr<Call> call = weak.lock()) call->Cancel();
  }
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return in_flight_.empty(); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&idle), absl::Seconds(10))) {
    PDS_LOG(WARNING) << "prefill client: " << in_flight_.size()
                     << " calls still in flight at shutdown";
  }
}

GrpcPrefillClient::StubPointers GrpcPrefillClient::StubsFor(const std::string& address) {
  absl::MutexLock lock(&mu_);
  Stubs& s = stubs_[address];
  if (!s.prefill) {
    std::shared_ptr<grpc::Channel> channel = MakeChannel(address, security_);
    s.prefill = v1::Prefill::NewStub(channel);
    s.health = grpc::health::v1::Health::NewStub(channel);
  }
  // The stubs live on the heap for the client's lifetime; the map may move its entries.
  return StubPointers{s.prefill.get(), s.health.get()};
}

void GrpcPrefillClient::Track(const std::shared_ptr<Call>& call) {
  absl::MutexLock lock(&mu_);
  in_flight_[call.get()] = call;
}

void GrpcPrefillClient::Untrack(const Call* call) {
  absl::MutexLock lock(&mu_);
  in_flight_.erase(call);
}

std::shared_ptr<PendingCall> GrpcPrefillClient::Prefill(const PrefillTarget& target,
                                                        const PrefillJob& job, PrefillDone done) {
  struct PrefillCall : Call {
    v1::PrefillRequest request;
    v1::PrefillResponse response;
  };
  auto call = std::make_shared<PrefillCall>();
  v1::PrefillRequest& r = call->request;
  r.set_request_id(job.request_id);
  for (int32_t t : job.prompt) r.add_token_ids(static_cast<uint32_t>(t));
  *r.mutable_sampling() = wire::SamplingToProto(job.sampling);
  wire::TargetToProto(job.target, job.model_fingerprint, r.mutable_target());
  r.mutable_target()->set_first_position(static_cast<uint32_t>(job.first_position));
  r.mutable_target()->set_num_tokens(static_cast<uint32_t>(job.num_tokens));
  call->context.set_deadline(absl::ToChronoTime(job.deadline));
  if (job.ttft_due != absl::InfiniteFuture()) {
    // Relative, as gRPC sends deadlines: the hosts' clocks need not agree.
    r.set_ttft_due_in_ms(
        std::clamp(absl::ToDoubleMilliseconds(job.ttft_due - absl::Now()), -86400e3, 86400e3));
  }
  Track(call);
  v1::Prefill::Stub* stub = StubsFor(target.address).prefill;
  stub->async()->Prefill(
      &call->context, &call->request, &call->response,
      [this, call, done = std::move(done)](grpc::Status status) {
        if (!status.ok()) {
          done(wire::FromGrpc(status));
        } else {
          const v1::PrefillResponse& p = call->response;
          done(PrefillResult{.first_token = static_cast<int32_t>(p.first_token_id()),
                             .worker_id = p.worker_id(),
                             .measured = wire::MeasurementFromProto(p)});
        }
        Untrack(call.get());
      });
  return call;
}

std::shared_ptr<PendingCall> GrpcPrefillClient::CancelPrefill(const PrefillTarget& target,
                                                              uint64_t transfer_token,
                                                              absl::Time deadline,
                                                              CancelDone done) {
  struct CancelCall : Call {
    v1::CancelPrefillRequest request;
    v1::CancelPrefillResponse response;
  };
  auto call = std::make_shared<CancelCall>();
  call->request.set_transfer_token(transfer_token);
  call->context.set_deadline(absl::ToChronoTime(deadline));
  Track(call);
  v1::Prefill::Stub* stub = StubsFor(target.address).prefill;
  stub->async()->CancelPrefill(&call->context, &call->request, &call->response,
                               [this, call, done = std::move(done)](grpc::Status status) {
                                 if (!status.ok()) {
                                   done(wire::FromGrpc(status));
                                 } else {
                                   done(call->response.writes_stopped());
                                 }
                                 Untrack(call.get());
                               });
  return call;
}

std::shared_ptr<PendingCall> GrpcPrefillClient::CheckAlive(const PrefillTarget& target,
                                                           absl::Time deadline, AliveDone done) {
  struct HealthCall : Call {
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
  };
  auto call = std::make_shared<HealthCall>();
  call->context.set_deadline(absl::ToChronoTime(deadline));
  Track(call);
  grpc::health::v1::Health::Stub* stub = StubsFor(target.address).health;
  stub->async()->Check(&call->context, &call->request, &call->response,
                       [this, call, done = std::move(done)](grpc::Status status) {
                         done(wire::FromGrpc(status));
                         Untrack(call.get());
                       });
  return call;
}

}  // namespace pdserve::decode
