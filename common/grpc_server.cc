#include "common/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_channel.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/status_macros.h"

namespace pdserve {
namespace {

// How long after the drain deadline cancelled calls may take to finish.
constexpr absl::Duration kDrainGrace = absl::Seconds(10);

}  // namespace

absl::Status GrpcServerConfig::Validate() const {
  RETURN_IF_ERROR(ParseHostPort(listen_address, "listen_address").status());
  if (max_message_bytes < 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes: ", max_message_bytes, " is below the minimum 4096"));
  }
  return absl::OkStatus();
}

// Answers every method no hosted service has, naming it and the services that are here
// (gRPC's own answer is UNIMPLEMENTED with an empty message).
class GrpcServer::UnknownMethods final : public grpc::CallbackGenericService {
 public:
  explicit UnknownMethods(std::string services) : services_(std::move(services)) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    class Reject final : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reject(const grpc::Status& status) { Finish(status); }
      void OnDone() override { delete this; }
    };
    return new Reject(
        grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                     absl::StrCat("method '", context->method(),
                                  "' is not served here (services: ", services_, ")")));
  }

 private:
  const std::string services_;
};

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const GrpcServerConfig& config, const std::vector<HostedService>& services) {
  RETURN_IF_ERROR(config.Validate());
  ASSIGN_OR_RETURN(HostPort host_port, ParseHostPort(config.listen_address, "listen_address"));
  // Our own health service (health_service.h), not gRPC's default one.
  grpc::EnableDefaultHealthCheckService(false);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  std::unique_ptr<GrpcServer> out(new GrpcServer());
  std::vector<std::string> names;
  for (const HostedService& s : services) names.push_back(s.name);
  out->health_ = std::make_unique<HealthService>(names);
  grpc::ServerBuilder builder;
  const bool require_client_cert =
      config.security.requires_client_cert() || config.always_require_client_cert;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   config.security.ServerCredentials(require_client_cert));
  if (!config.security.tls() && !IsLoopbackHost(host_port.host)) {
    PDS_LOG(WARNING) << "gRPC listener " << config.listen_address
                     << " is plaintext and reachable from other hosts: anyone who reaches it "
                        "can call it; set --tls_cert, --tls_key and --tls_ca (docs/security.md)";
  }
  int bound_port = 0;
  builder.AddListeningPort(host_port.ToString(), credentials, &bound_port);
  // gRPC sets SO_REUSEPORT by default: a second process could then bind this port and take
  // a share of new connections. Ours is owned: a second bind fails with EADDRINUSE.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Clients' keepalive pings (grpc_channel.h) are welcome this often: gRPC's default (one per
  // 5 min while the server sends nothing, as on a worker's registry stream) would count them
  // as abuse and close the connection.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             kMinServerPingIntervalMs);
  builder.SetMaxReceiveMessageSize(config.max_message_bytes);
  builder.SetMaxSendMessageSize(config.max_message_bytes);
  builder.RegisterService(out->health_.get());
  names.push_back("grpc.health.v1.Health");
  out->unknown_methods_ = std::make_unique<UnknownMethods>(absl::StrJoin(names, ", "));
  builder.RegisterCallbackGenericService(out->unknown_methods_.get());
  for (const HostedService& s : services) builder.RegisterService(s.service);
  out->server_ = builder.BuildAndStart();
  if (out->server_ == nullptr || bound_port == 0) {
    return absl::UnavailableError(absl::StrCat("grpc: cannot listen on ", config.listen_address));
  }
  out->port_ = bound_port;
  out->tls_ = config.security.tls();
  out->address_ = WithPort(host_port, bound_port);
  out->SetServing(false);
  return out;
}

GrpcServer::~GrpcServer() {
  if (!drained_ && server_ != nullptr) Drain(absl::Now());
}

void GrpcServer::SetServing(bool serving) { health_->SetServing(serving); }
void GrpcServer::SetReady(bool ready) { health_->SetReady(ready); }

void GrpcServer::Drain(absl::Time deadline) {
  if (drained_) return;
  drained_ = true;
  // NOT_SERVING for good; Watch streams are told and ended, so that they do not hold the
  // drain until its deadline.
  health_->Shutdown();
  // Shutdown cancels what is still running at the deadline, then waits for every call's
  // reactor to finish. A reactor that never finishes would hang the process forever: that is
  // a bug, so say so loudly and exit rather than hang (the orchestrator restarts us).
  absl::Notification done;
  std::thread watchdog([&done, deadline] {
    if (done.WaitForNotificationWithDeadline(deadline + kDrainGrace)) return;
    PDS_LOG(ERROR) << "gRPC server still not shut down " << absl::FormatDuration(kDrainGrace)
                   << " after the drain deadline: a call never finished; exiting";
    std::_Exit(3);
  });
  server_->Shutdown(absl::ToChronoTime(deadline));
  server_->Wait();
  done.Notify();
  watchdog.join();
}

}  // namespace pdserve
