#include "router/registry_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/registry_client.h"
#include "common/secret_file.h"
#include "proto/bridge/report_bridge.h"
#include "proto/bridge/request_bridge.h"
#include "router/router_wire.h"

namespace pdserve::router {
namespace {

constexpr uint32_t kDefaultDecisions = 20;
constexpr uint32_t kMaxDecisions = 1000;

// One worker's stream. Operations start only from this reactor's own reactions; the read
// and write sides may run at once, so the one thing they share (whether the ack write is
// still out, which a Finish must wait for) is locked.
class WorkerStream final : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::RouterMessage> {
 public:
  WorkerStream(WorkerRegistry* registry, absl::Duration report_interval,
               absl::Duration heartbeat_interval, const std::atomic<bool>* draining)
      : registry_(registry),
        report_interval_(report_interval),
        heartbeat_interval_(heartbeat_interval),
        draining_(draining) {
    StartRead(&in_);
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
      absl::StatusOr<WorkerInfo> info = WorkerInfoFromProto(in_.registration());
      absl::StatusOr<uint64_t> session = info.ok() ? registry_->Register(*info) : info.status();
      v1::RegistrationAck* ack = out_.mutable_ack();
      ack->set_report_interval_ms(
          static_cast<uint32_t>(absl::ToInt64Milliseconds(report_interval_)));
      ack->set_heartbeat_interval_ms(
          static_cast<uint32_t>(absl::ToInt64Milliseconds(heartbeat_interval_)));
      if (!session.ok()) {
        PDS_LOG(WARNING) << "refused registration of '" << worker_id_ << "': " << session.status();
        ack->set_accepted(false);
        ack->set_message(std::string(session.status().message()));
        {
          absl::MutexLock lock(&mu_);
          finished_ = true;
        }
        StartWriteAndFinish(&out_, grpc::WriteOptions(), bridge::ToGrpc(session.status()));
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
      StartRead(&in_);
      return;
    }
    if (draining_->load()) {
      Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the router is shutting down"));
      return;
    }
    bool known = true;
    if (in_.has_load()) {
      known = registry_->Report(session_, bridge::ReportFromProto(in_.load()));
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

  void OnWriteDone(bool) override {
    grpc::Status deferred;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!finish_pending_) return;
      deferred = pending_status_;
    }
    Finish(deferred);
  }

  void OnDone() override {
    if (session_ != 0) registry_->Unregister(session_, "registry stream closed");
    delete this;
  }

 private:
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
  v1::WorkerMessage in_;
  v1::RouterMessage out_;
  uint64_t session_ = 0;  // Read side only.
  std::string worker_id_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_pending_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status pending_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

RegistryService::RegistryService(WorkerRegistry* registry, DecisionLog* log,
                                 const CostModel* cost_model, RegistryServiceOptions options)
    : registry_(registry), log_(log), cost_model_(cost_model), options_(std::move(options)) {}

grpc::ServerBidiReactor<v1::WorkerMessage, v1::RouterMessage>* RegistryService::Connect(
    grpc::CallbackServerContext* context) {
  if (!options_.registration_token.empty()) {
    const auto& metadata = context->client_metadata();
    const auto found = metadata.find(kRegistrationTokenHeader);
    const absl::string_view given =
        found == metadata.end() ? absl::string_view()
                                : absl::string_view(found->second.data(), found->second.size());
    if (!ConstantTimeEquals(given, options_.registration_token)) {
      PDS_LOG_EVERY_N_SEC(WARNING, 5)
          << "refused a registration from " << context->peer() << ": registration token "
          << (found == metadata.end() ? "missing" : "wrong");
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
  }
  return new WorkerStream(registry_, options_.report_interval, options_.heartbeat_interval,
                          &draining_);
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
