// Client side of grpc.health.v1, for launchers (pdctl) and tests.
// Thread-safety: stateless functions.
#ifndef PDSERVE_SERVER_HEALTH_CLIENT_H_
#define PDSERVE_SERVER_HEALTH_CLIENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/grpc_security.h"

namespace pdserve {

enum class HealthState { kUnknown, kServing, kNotServing };

// One Check call against `address` (host:port) for `service` ("": the whole server;
// "pdserve.ready", "pdserve.live": the probes, see health_service.h).
absl::StatusOr<HealthState> CheckHealth(const std::string& address, absl::Duration timeout,
                                        const GrpcSecurity& security = GrpcSecurity(),
                                        const std::string& service = "");

// Polls until the server reports SERVING; DEADLINE_EXCEEDED (with the last error) otherwise.
absl::Status WaitForServing(const std::string& address, absl::Time deadline,
                            const GrpcSecurity& security = GrpcSecurity());

}  // namespace pdserve

#endif  // PDSERVE_SERVER_HEALTH_CLIENT_H_
