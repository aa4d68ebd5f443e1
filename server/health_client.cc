#include "server/health_client.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/grpc_channel.h"

namespace pdserve {

absl::StatusOr<HealthState> CheckHealth(const std::string& address, absl::Duration timeout,
                                        const GrpcSecurity& security, const std::string& service) {
  auto channel = MakeChannel(address, security);
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("health check of ", address, ": ", status.error_message()));
  }
  switch (response.status()) {
    case grpc::health::v1::HealthCheckResponse::SERVING:
      return HealthState::kServing;
    case grpc::health::v1::HealthCheckResponse::NOT_SERVING:
      return HealthState::kNotServing;
    default:
      return HealthState::kUnknown;
  }
}

absl::Status WaitForServing(const std::string& address, absl::Time deadline,
                            const GrpcSecurity& security) {
  absl::Status last = absl::UnavailableError("no health check made");
  absl::Duration backoff = absl::Milliseconds(10);
  while (absl::Now() < deadline) {
    auto state = CheckHealth(address, std::min(absl::Seconds(1), deadline - absl::Now()), security);
    if (state.ok() && *state == HealthState::kServing) return absl::OkStatus();
    last = state.ok() ? absl::UnavailableError(absl::StrCat(address, " is not SERVING yet"))
                      : state.status();
    absl::SleepFor(std::min(backoff, std::max(absl::ZeroDuration(), deadline - absl::Now())));
    backoff = std::min(backoff * 2, absl::Milliseconds(200));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("timed out waiting for ", address, " to serve: ", last.message()));
}

}  // namespace pdserve
