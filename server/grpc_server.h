// A gRPC server with the pieces every pdserve process needs: the grpc.health.v1 service
// (health_service.h: NOT_SERVING until the process says it is ready, and again while
// draining, when open Watch streams are ended so that they do not hold the drain), server
// reflection, port-0 binding that reports the real address, a listener of our own that keeps
// accepting through descriptor exhaustion (tcp_listener.h), and a drain that lets in-flight
// calls finish before a deadline.
// Thread-safety: SetServing/Drain may be called from any thread.
#ifndef PDSERVE_SERVER_GRPC_SERVER_H_
#define PDSERVE_SERVER_GRPC_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tcp_listener.h"
#include "server/grpc_security.h"
#include "server/health_service.h"

namespace grpc {
class Server;
class Service;
namespace experimental {
class ExternalConnectionAcceptor;
}  // namespace experimental
}  // namespace grpc

namespace pdserve {

// A service the server hosts, with the full name health checks ask for (the generated
// class's service_full_name(), e.g. "pdserve.v1.Generation").
struct HostedService {
  grpc::Service* service = nullptr;
  std::string name;
};

struct GrpcServerConfig {
  // host:port to listen on; port 0 picks a free port. Default "127.0.0.1:0".
  std::string listen_address = "127.0.0.1:0";
  // Largest message accepted or sent. Default 64 MiB.
  int max_message_bytes = 64 << 20;
  // Plaintext by default; TLS (and client certificates if it requires them) when
  // `security.tls()`. A plaintext listener off loopback is logged as a warning.
  GrpcSecurity security;
  // Refuse clients without a certificate whenever TLS is on, whatever `security` requires
  // (the router's registry listener: only workers with a certificate may register).
  bool always_require_client_cert = false;
  // The flag that set listen_address, for error messages ("--listen").
  std::string field = "listen_address";
  // Connections accepted on a descriptor numbered at or past this are closed at once. 0 (the
  // default): FdBudget::grpc_refuse_at() of the process's limit when the server starts
  // (fd_limits.h); negative: none.
  int64_t refuse_fd_at = 0;
  // Checks every field; errors name the field and its limit.
  absl::Status Validate() const;
};

class GrpcServer {
 public:
  // Builds and starts a server hosting `services` (not owned; they must outlive the server).
  // Health starts NOT_SERVING.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const GrpcServerConfig& config, const std::vector<HostedService>& services);
  ~GrpcServer();  // Drains with a zero deadline if Drain() was not called.

  // The bound address, host:port.
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  // Whether the listener speaks TLS.
  bool tls() const { return tls_; }
  const TcpListenerStats& listener_stats() const { return listener_->stats(); }

  // Sets the health status of the whole server ("") and of every hosted service.
  void SetServing(bool serving);
  // The readiness condition of the process's role (health_service.h, kReadiness).
  void SetReady(bool ready);
  // Health goes NOT_SERVING for good, new calls are refused, and in-flight calls get until
  // `deadline` to finish before they are cancelled. Returns once the server has stopped.
  void Drain(absl::Time deadline);

  grpc::Server* server() { return server_.get(); }
  HealthService& health() { return *health_; }

 private:
  class UnknownMethods;
  GrpcServer() = default;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<UnknownMethods> unknown_methods_;
  // Destroyed after server_ (declared before it): the listener's thread is stopped by Drain.
  std::unique_ptr<TcpListener> listener_;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;
  bool tls_ = false;
  bool drained_ = false;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVER_GRPC_SERVER_H_
