#include "server/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/fd_limits.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/status_macros.h"
#include "server/grpc_channel.h"

namespace pdserve {
namespace {

// How long after the drain deadline cancelled calls may take to finish.
constexpr absl::Duration kDrainGrace = absl::Seconds(10);

// A TLS handshake across regions takes well under a second; a client that has not finished
// one in 20 s is gone or hostile.
constexpr int kHandshakeTimeoutMs = 20'000;

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
  // Our own listener hands each connection to gRPC: gRPC 1.51's closes for good on the first
  // EMFILE ("Failed accept4"), leaving a live process that no client can reach; ours waits
  // the shortage out and keeps a descriptor reserve (tcp_listener.h). It also binds without
  // SO_REUSEPORT (gRPC's default would let a second process take a share of new connections)
  // and says "in use" when the port is taken.
  TcpListenerOptions listen_options;
  listen_options.listen_address = config.listen_address;
  listen_options.field = config.field;
  listen_options.refuse_fd_at = config.refuse_fd_at != 0
                                    ? config.refuse_fd_at
                                    : FdBudget::ForLimit(CurrentFileLimit()).grpc_refuse_at();
  ASSIGN_OR_RETURN(out->listener_, TcpListener::Bind(std::move(listen_options)));
  out->acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, credentials);
  // A connection that never finishes its handshake holds a descriptor for this long (gRPC's
  // default is 120 s), which a flood of idle connections would turn into an outage.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, kHandshakeTimeoutMs);
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
  if (out->server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("grpc: cannot start a server for ", config.listen_address));
  }
  const int listen_fd = out->listener_->fd();
  out->listener_->Start([acceptor = out->acceptor_.get(), listen_fd](int fd) {
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters connection;
    connection.listener_fd = listen_fd;
    connection.fd = fd;  // gRPC owns it from here.
    acceptor->HandleNewConnection(&connection);
  });
  out->port_ = out->listener_->port();
  out->tls_ = config.security.tls();
  out->address_ = WithPort(host_port, out->port_);
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
  // No new connections from here (a connection handed to a shut-down server would leak).
  listener_->Stop();
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
