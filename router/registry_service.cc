#include "router/registry_service.h"

#include <algorithm>
#include <climits>
#include <deque>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/secret_file.h"
#include "router/client_identity.h"
#include "router/router_wire.h"
#include "router/worker_certificate.h"
#include "server/registry_client.h"
#include "wire/report_bridge.h"
#include "wire/request_bridge.h"

namespace pdserve::router {
namespace {

constexpr uint32_t kDefaultDecisions = 20;
constexpr uint32_t kMaxDecisions = 1000;

class WorkerStream;

// The registry's way back to one worker: orders go out on its stream. Held by the registry
// entry, which may outlive the stream's reactor: detached (orders dropped) once the stream is
// done, and queued until the registration's answer is on its way.
class StreamControl final : public WorkerControl {
 public:
  void SwitchRole(WorkerRole role, const std::string& reason) override;
  void Attach(WorkerStream* stream);
  void Detach();

 private:
  absl::Mutex mu_;
  WorkerStream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool detached_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<v1::RouterMessage> early_ ABSL_GUARDED_BY(mu_);  // Before Attach.
};

// One worker's stream. Reads start only from this reactor's own reactions; writes (the
// registration's answer, then the router's orders) from its reactions or from Send, one at
// a time. The read and write sides may run at once, so what they share (the write in
// flight, the queued orders, whether a Finish must wait for the write) is locked.
class WorkerStream final : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::RouterMessage> {
 public:
  WorkerStream(WorkerRegistry* registry, absl::Duration report_interval,
               absl::Duration heartbeat_interval, const std::atomic<bool>* draining,
               const AddressVerifier* verifier, CountsByKey* peers, int peer_limit,
               std::string peer, std::string worker_id_uri_prefix,
               std::vector<std::string> certificate_uris)
      : registry_(registry),
        report_interval_(report_interval),
        heartbeat_interval_(heartbeat_interval),
        draining_(draining),
        verifier_(verifier),
        peers_(peers),
        peer_limit_(peer_limit),
        peer_(std::move(peer)),
        worker_id_uri_prefix_(std::move(worker_id_uri_prefix)),
        certificate_uris_(std::move(certificate_uris)),
        control_(std::make_shared<StreamControl>()) {
    StartRead(&in_);
  }

  // Any thread: queues `message` after the writes already out.
  void Send(const v1::RouterMessage& message) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      if (writing_) {
        outbox_.push_back(message);
        return;
      }
      writing_ = true;
      out_ = message;
    }
    StartWrite(&out_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // The worker closed the stream (or it broke).
      Close(grpc::Status::OK);
      return;
    }
    if (session_ == 0) {
      if (!in_.has_registration()) {
        Close(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                           "the first message must be a registration"));
        return;
      }
      worker_id_ = in_.registration().worker_id();
      absl::StatusOr<WorkerInfo> info = wire::RegistrationFromProto(in_.registration());
      if (!info.ok()) {
        Answer(info.status());
        return;
      }
      if (!worker_id_uri_prefix_.empty()) {
        absl::Status proved =
            CheckWorkerIdCertificate(info->worker_id, worker_id_uri_prefix_, certificate_uris_);
        if (!proved.ok()) {
          PDS_LOG_EVERY_N_SEC(WARNING, 5)
              << "refused a registration from " << peer_ << ": " << proved.message();
          Answer(proved);
          return;
        }
      }
      if (!peers_->TryAdd(peer_, peer_limit_ > 0 ? peer_limit_ : INT64_MAX)) {
        Answer(absl::ResourceExhaustedError(
            absl::StrCat("registration: ", peer_, " holds ", peer_limit_,
                         " worker registrations already (--max_workers_per_peer)")));
        return;
      }
      counted_ = true;
      if (verifier_ == nullptr) {
        Answer(registry_->Register(*info, control_));
        return;
      }
      // The address must answer as the worker; the answer continues the registration.
      verifier_->Verify(info->grpc_address, info->worker_id, info->epoch,
                        [this, info = *info](absl::Status verified) {
                          if (!verified.ok()) {
                            Answer(verified);
                            return;
                          }
                          RegisterVerified(info);
                        });
      return;
    }
    if (draining_->load()) {
      Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the router is shutting down"));
      return;
    }
    bool known = true;
    if (in_.has_load()) {
      known = registry_->Report(session_, wire::ReportFromProto(in_.load()));
    } else if (in_.has_prefix_cache()) {
      known = registry_->ApplyPrefix(session_, PrefixUpdateFromProto(in_.prefix_cache()));
    }
    if (!known) {
      // Replaced or expired: close so that the worker registers again.
      Close(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                         "this registration was removed; register again"));
      return;
    }
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    bool finish = false;
    grpc::Status deferred;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (finish_pending_) {
        finish = true;
        deferred = pending_status_;
      } else if (ok && !finished_ && !outbox_.empty()) {
        writing_ = true;
        out_ = std::move(outbox_.front());
        outbox_.pop_front();
      } else {
        return;
      }
    }
    if (finish) {
      Finish(deferred);
    } else {
      StartWrite(&out_);
    }
  }

  void OnDone() override {
    control_->Detach();  // No order reaches a deleted stream.
    if (session_ != 0) registry_->Unregister(session_, "registry stream closed");
    if (counted_) peers_->Remove(peer_);
    delete this;
  }

 private:
  // Registers `info`, whose address answered as it; if another live process holds its id,
  // asks the holder's address too, and replaces a holder that does not answer as itself.
  void RegisterVerified(const WorkerInfo& info) {
    absl::StatusOr<uint64_t> session = registry_->Register(info, control_);
    std::optional<WorkerInfo> holder;
    if (session.status().code() == absl::StatusCode::kAlreadyExists)
      holder = registry_->Registered(info.worker_id);
    if (!holder.has_value()) {
      Answer(session);
      return;
    }
    verifier_->Verify(
        holder->grpc_address, holder->worker_id, holder->epoch,
        [this, info, refused = session.status(), held_epoch = holder->epoch](absl::Status held) {
          if (held.ok()) {  // Two live processes with one id.
            Answer(refused);
            return;
          }
          PDS_LOG(WARNING) << "worker '" << info.worker_id << "' (epoch " << held_epoch
                           << ") no longer answers at its address (" << held.message()
                           << "): replaced by epoch " << info.epoch << " from " << peer_;
          Answer(registry_->Register(info, control_, held_epoch));
        });
  }

  // The registration's answer: refused (the stream ends with `session`'s status) or accepted
  // (reports follow).
  void Answer(const absl::StatusOr<uint64_t>& session) {
    v1::RegistrationAck* ack = out_.mutable_ack();
    ack->set_report_interval_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(report_interval_)));
    ack->set_heartbeat_interval_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(heartbeat_interval_)));
    if (!session.ok()) {
      PDS_LOG(WARNING) << "refused registration of '" << worker_id_ << "' from " << peer_ << ": "
                       << session.status();
      ack->set_accepted(false);
      ack->set_message(std::string(session.status().message()));
      {
        absl::MutexLock lock(&mu_);
        finished_ = true;
      }
      StartWriteAndFinish(&out_, grpc::WriteOptions(), wire::ToGrpc(session.status()));
      return;
    }
    session_ = *session;
    ack->set_accepted(true);
    ack->set_message(absl::StrCat("registered ", worker_id_));
    {
      absl::MutexLock lock(&mu_);
      writing_ = true;
    }
    StartWrite(&out_);
    control_->Attach(this);  // Orders follow the answer.
    StartRead(&in_);
  }

  void Close(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
      if (writing_) {  // Finish after the ack's write completes.
        finish_pending_ = true;
        pending_status_ = status;
        return;
      }
    }
    Finish(status);
  }

  WorkerRegistry* registry_;
  const absl::Duration report_interval_;
  const absl::Duration heartbeat_interval_;
  const std::atomic<bool>* draining_;
  const AddressVerifier* const verifier_;  // Null: addresses are not verified.
  CountsByKey* const peers_;               // Live registrations by peer.
  const int peer_limit_;                   // Of one peer; 0: none.
  const std::string peer_;  // The peer's address (router/client_identity.h's naming).
  const std::string worker_id_uri_prefix_;           // Empty: ids are not checked.
  const std::vector<std::string> certificate_uris_;  // The peer certificate's URI SANs.
  bool counted_ = false;                             // Holds one of peers_'s places.
  const std::shared_ptr<StreamControl> control_;
  v1::WorkerMessage in_;
  // The write in flight: filled by whoever starts it (under mu_ once the answer is out).
  v1::RouterMessage out_;
  std::deque<v1::RouterMessage> outbox_ ABSL_GUARDED_BY(mu_);
  uint64_t session_ = 0;  // Read side only.
  std::string worker_id_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_pending_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status pending_status_ ABSL_GUARDED_BY(mu_);
};

void StreamControl::SwitchRole(WorkerRole role, const std::string& reason) {
  v1::RouterMessage m;
  m.mutable_switch_role()->set_role(wire::RoleToProto(role));
  m.mutable_switch_role()->set_reason(reason);
  absl::MutexLock lock(&mu_);
  if (detached_) return;
  if (stream_ == nullptr) {
    early_.push_back(std::move(m));
    return;
  }
  stream_->Send(m);
}

void StreamControl::Attach(WorkerStream* stream) {
  absl::MutexLock lock(&mu_);
  if (detached_) return;
  stream_ = stream;
  for (const v1::RouterMessage& m : early_) stream_->Send(m);
  early_.clear();
}

void StreamControl::Detach() {
  absl::MutexLock lock(&mu_);
  detached_ = true;
  stream_ = nullptr;
  early_.clear();
}

}  // namespace

RegistryService::RegistryService(WorkerRegistry* registry, DecisionLog* log,
                                 const CostModel* cost_model, RegistryServiceOptions options)
    : registry_(registry), log_(log), cost_model_(cost_model), options_(std::move(options)) {}

grpc::ServerBidiReactor<v1::WorkerMessage, v1::RouterMessage>* RegistryService::Connect(
    grpc::CallbackServerContext* context) {
  if (!Authorized(context, "a registration")) {
    class Refuse final : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::RouterMessage> {
     public:
      Refuse() {
        Finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                            "registration token missing or wrong (--registration_token_file)"));
      }
      void OnDone() override { delete this; }
    };
    return new Refuse();
  }
  return new WorkerStream(registry_, options_.report_interval, options_.heartbeat_interval,
                          &draining_, options_.verifier, &peers_, options_.max_workers_per_peer,
                          ClientFromPeer(context->peer()), options_.worker_id_uri_prefix,
                          options_.worker_id_uri_prefix.empty()
                              ? std::vector<std::string>()
                              : PeerCertificateUris(*context->auth_context()));
}

bool RegistryService::Authorized(grpc::CallbackServerContext* context, const char* what) const {
  if (options_.registration_token.empty()) return true;
  const auto& metadata = context->client_metadata();
  const auto found = metadata.find(kRegistrationTokenHeader);
  const absl::string_view given =
      found == metadata.end() ? absl::string_view()
                              : absl::string_view(found->second.data(), found->second.size());
  if (ConstantTimeEquals(given, options_.registration_token)) return true;
  PDS_LOG_EVERY_N_SEC(WARNING, 5) << "refused " << what << " from " << context->peer()
                                  << ": registration token "
                                  << (found == metadata.end() ? "missing" : "wrong");
  return false;
}

grpc::ServerUnaryReactor* RegistryService::SwitchRole(grpc::CallbackServerContext* context,
                                                      const v1::SwitchRoleRequest* request,
                                                      v1::SwitchRoleResponse* response) {
  auto* reactor = context->DefaultReactor();
  if (!Authorized(context, "a role switch")) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                 "registration token missing or wrong (a role switch needs the "
                                 "cluster's --registration_token_file)"));
    return reactor;
  }
  if (request->worker_id().empty() || request->worker_id().size() > kMaxWorkerIdBytes) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 absl::StrCat("worker_id: must be 1 to ", kMaxWorkerIdBytes,
                                              " bytes, got ", request->worker_id().size())));
    return reactor;
  }
  absl::StatusOr<WorkerRole> role = wire::RoleFromProto(request->role(), "role");
  if (!role.ok()) {
    reactor->Finish(wire::ToGrpc(role.status()));
    return reactor;
  }
  absl::StatusOr<std::string> done =
      registry_->RequestSwitch(request->worker_id(), *role, "asked by " + context->peer());
  if (!done.ok()) {
    reactor->Finish(wire::ToGrpc(done.status()));
    return reactor;
  }
  response->set_message(*done);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* RegistryService::GetClusterStatus(grpc::CallbackServerContext* context,
                                                            const v1::ClusterStatusRequest* request,
                                                            v1::ClusterStatus* response) {
  auto* reactor = context->DefaultReactor();
  if (request->max_decisions() > kMaxDecisions) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 absl::StrCat("max_decisions: ", request->max_decisions(),
                                              " is over the limit of ", kMaxDecisions)));
    return reactor;
  }
  for (const WorkerStatus& w : registry_->Status()) WorkerStatusToProto(w, response->add_workers());
  const uint32_t n = request->max_decisions() == 0 ? kDefaultDecisions : request->max_decisions();
  for (const DecisionRecord& r : log_->Recent(n))
    DecisionRecordToProto(r, response->add_recent_decisions());
  response->set_policy(options_.policy);
  response->set_in_flight(options_.in_flight ? static_cast<uint32_t>(options_.in_flight()) : 0);
  for (const auto& [name, value] : cost_model_->Coefficients())
    (*response->mutable_cost_model())[name] = value;
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace pdserve::router
