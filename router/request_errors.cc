#include "router/request_errors.h"

#include "absl/strings/str_cat.h"
#include "wire/request_bridge.h"

namespace pdserve::router {

grpc::Status ToGrpcWithRetryAfter(const absl::Status& status,
                                  grpc::CallbackServerContext* context) {
  return wire::ToGrpc(status, context);
}

std::string ErrorType(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "";
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      return "invalid_argument";
    case grpc::StatusCode::NOT_FOUND:
      return "not_found";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "overloaded";
    case grpc::StatusCode::UNAVAILABLE:
      return "unavailable";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "deadline_exceeded";
    case grpc::StatusCode::CANCELLED:
      return "cancelled";
    default:
      return "internal";
  }
}

std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(static_cast<int>(code)));
}

void RecordOutcome(RouterMetrics& metrics, const std::string& model, const grpc::Status& status) {
  metrics.Requests(model, CodeName(status.error_code())).Increment();
  if (!status.ok()) metrics.RequestError(model, ErrorType(status.error_code())).Increment();
}

}  // namespace pdserve::router
