// How the router turns failures into gRPC statuses and counts them: a retry-after hint on the
// status (common/retry_after.h) becomes the "retry-after-ms" trailer;
// every answered request is counted by code and, if it failed, by error type.
// Thread-safety: stateless.
#ifndef PDSERVE_ROUTER_REQUEST_ERRORS_H_
#define PDSERVE_ROUTER_REQUEST_ERRORS_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/status.h"
#include "router/router_metrics.h"

namespace pdserve::router {

// absl -> gRPC; a retry-after hint becomes the "retry-after-ms" trailer on `context`.
grpc::Status ToGrpcWithRetryAfter(const absl::Status& status, grpc::CallbackServerContext* context);
// "invalid_argument", "not_found", "overloaded", "unavailable", "deadline_exceeded",
// "cancelled", "internal" (empty for OK).
std::string ErrorType(grpc::StatusCode code);
std::string CodeName(grpc::StatusCode code);
void RecordOutcome(RouterMetrics& metrics, const std::string& model, const grpc::Status& status);

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_REQUEST_ERRORS_H_
