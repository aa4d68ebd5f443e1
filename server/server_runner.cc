#include "server/server_runner.h"

#include <grpcpp/server.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"
#include "common/fd_limits.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/serving_info.h"
#include "common/status_macros.h"

namespace pdserve {

absl::Status ServerRunnerConfig::Validate() const {
  RETURN_IF_ERROR(grpc.Validate());
  if (!internal_grpc.listen_address.empty()) RETURN_IF_ERROR(internal_grpc.Validate());
  if (!metrics_address.empty()) {
    RETURN_IF_ERROR(ParseHostPort(metrics_address, "metrics_address").status());
  }
  if (drain_timeout < absl::ZeroDuration() || drain_timeout > absl::Hours(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "drain_timeout: ", absl::FormatDuration(drain_timeout), " is outside [0s, 1h]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ServerRunner>> ServerRunner::Start(
    const ServerRunnerConfig& config, const std::vector<HostedService>& services,
    const std::vector<HostedService>& internal_services,
    std::shared_ptr<prometheus::Registry> registry, const std::string& component) {
  RETURN_IF_ERROR(config.Validate());
  // Before any listener: the descriptor budget of every listener follows from this limit.
  const int64_t before = CurrentFileLimit();
  if (auto raised = RaiseFileLimitToHard(); !raised.ok()) {
    PDS_LOG(WARNING) << raised.status();
  } else if (*raised != before) {
    PDS_LOG(INFO) << "open-file limit raised from " << before << " to " << *raised;
  }
  std::unique_ptr<ServerRunner> runner(new ServerRunner());
  runner->config_ = config;
  std::vector<HostedService> main_services = services;
  if (config.internal_grpc.listen_address.empty()) {
    main_services.insert(main_services.end(), internal_services.begin(), internal_services.end());
  } else {
    ASSIGN_OR_RETURN(runner->internal_, GrpcServer::Start(config.internal_grpc, internal_services));
  }
  ASSIGN_OR_RETURN(runner->grpc_, GrpcServer::Start(config.grpc, main_services));
  if (!config.metrics_address.empty()) {
    ASSIGN_OR_RETURN(runner->metrics_,
                     MetricsServer::Start(config.metrics_address, std::move(registry), component,
                                          config.build_info));
  }
  ServingInfo more;
  if (config.start_more_listeners) {
    ASSIGN_OR_RETURN(more, config.start_more_listeners(runner->grpc_->server()->InProcessChannel(
                               grpc::ChannelArguments())));
  }
  if (!config.serving_info_path.empty()) {
    ServingInfo info{{"grpc", runner->grpc_address()}, {"pid", absl::StrCat(getpid())}};
    info.insert(more.begin(), more.end());
    if (runner->metrics_) info["metrics"] = runner->metrics_->address();
    if (runner->internal_) info["internal"] = runner->internal_->address();
    RETURN_IF_ERROR(WriteServingInfo(config.serving_info_path, info));
  }
  PDS_LOG(INFO) << component << " listening: grpc=" << runner->grpc_address()
                << (runner->grpc_->tls() ? " (tls)" : "")
                << (runner->internal_ ? " internal=" + runner->internal_->address() : "")
                << " metrics=" << runner->metrics_address();
  return runner;
}

void ServerRunner::SetServing(bool serving) {
  grpc_->SetServing(serving);
  if (internal_) internal_->SetServing(serving);
}

void ServerRunner::SetReady(bool ready) {
  grpc_->SetReady(ready);
  if (internal_) internal_->SetReady(ready);
}

std::string ServerRunner::metrics_address() const {
  return metrics_ ? metrics_->address() : std::string();
}

void ServerRunner::RunUntilShutdown(ShutdownSignal& signal,
                                    const std::function<void(absl::Time deadline)>& on_drain) {
  const int sig = signal.Wait();
  PDS_LOG(INFO) << "shutdown requested (signal " << sig << "); draining for up to "
                << absl::FormatDuration(config_.drain_timeout);
  const absl::Time deadline = absl::Now() + config_.drain_timeout;
  SetServing(false);
  if (on_drain) on_drain(deadline);
  // Clients' calls first; cluster members keep their links until those are done.
  grpc_->Drain(deadline);
  if (internal_) internal_->Drain(deadline);
  PDS_LOG(INFO) << "drained";
}

}  // namespace pdserve
