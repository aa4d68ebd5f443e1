// The lifecycle every pdserve server process shares: start the gRPC server (health NOT_SERVING)
// and the /metrics server, write the serving-info file with the bound addresses, go SERVING
// when the caller is ready, and on SIGTERM/SIGINT drain: health NOT_SERVING, in-flight calls
// get `drain_timeout` to finish, then the process exits cleanly.
// Thread-safety: SetServing() from any thread; RunUntilShutdown() from main only.
#ifndef PDSERVE_SERVER_SERVER_RUNNER_H_
#define PDSERVE_SERVER_SERVER_RUNNER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/serving_info.h"
#include "common/shutdown_signal.h"
#include "server/grpc_server.h"
#include "server/metrics_server.h"

namespace pdserve {

struct ServerRunnerConfig {
  // The gRPC listener.
  GrpcServerConfig grpc;
  // A second gRPC listener for the services only cluster members call (the router's
  // registry), so that they can sit on an internal interface and demand client certificates.
  // Its listen_address empty (the default): those services share the main listener.
  GrpcServerConfig internal_grpc{.listen_address = ""};
  // host:port for /metrics; port 0 picks a free port; empty disables metrics.
  // Default "127.0.0.1:0".
  std::string metrics_address = "127.0.0.1:0";
  // Where to write the bound addresses (see serving_info.h); empty: not written.
  std::string serving_info_path;
  // More labels of pdserve_build_info (a worker's engine backend and instruction set).
  std::map<std::string, std::string> build_info;
  // How long in-flight calls may run after SIGTERM before they are cancelled. Default 30 s.
  absl::Duration drain_timeout = absl::Seconds(30);
  // Called once the gRPC listeners are up and before the serving-info file is written, with a
  // channel to the main listener's services inside this process: may start more listeners
  // (the router's HTTP front) and returns their addresses, which the file lists too.
  std::function<absl::StatusOr<ServingInfo>(std::shared_ptr<grpc::Channel> in_process)>
      start_more_listeners;

  absl::Status Validate() const;
};

class ServerRunner {
 public:
  // Serves `services` on the main listener and `internal_services` on the internal one (or on
  // the main one when there is no internal listener).
  static absl::StatusOr<std::unique_ptr<ServerRunner>> Start(
      const ServerRunnerConfig& config, const std::vector<HostedService>& services,
      const std::vector<HostedService>& internal_services,
      std::shared_ptr<prometheus::Registry> registry, const std::string& component);

  const std::string& grpc_address() const { return grpc_->address(); }
  // The internal listener's address; the main one's when there is no internal listener.
  const std::string& internal_grpc_address() const {
    return internal_ ? internal_->address() : grpc_->address();
  }
  // Empty when metrics are disabled.
  std::string metrics_address() const;
  void SetServing(bool serving);
  // The role's readiness condition, answered on "pdserve.ready" (a worker: registered with a
  // router; a router: a decode worker registered). Default true.
  void SetReady(bool ready);

  // Blocks until `signal` fires; then calls `on_drain` with the drain's deadline (stop
  // admitting new work, and finish what runs outside the gRPC listeners by then; may be
  // empty), drains the main gRPC listener, then the internal one, by that deadline, and
  // returns.
  void RunUntilShutdown(ShutdownSignal& signal,
                        const std::function<void(absl::Time deadline)>& on_drain);

 private:
  ServerRunner() = default;
  ServerRunnerConfig config_;
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<GrpcServer> internal_;  // Null without an internal listener.
  std::unique_ptr<MetricsServer> metrics_;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVER_SERVER_RUNNER_H_
