#include "router/request_errors.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "proto/bridge/request_bridge.h"

namespace pdserve::router {

int64_t RetryAfterMs(const std::string& message) {
  static constexpr char kKey[] = "retry-after-ms: ";
  constexpr size_t kKeySize = sizeof(kKey) - 1;
  const size_t at = message.find(kKey);
  if (at == std::string::npos) return -1;
  size_t end = at + kKeySize;
  while (end < message.size() && message[end] >= '0' && message[end] <= '9') ++end;
  int64_t ms;
  if (!absl::SimpleAtoi(absl::string_view(message).substr(at + kKeySize, end - at - kKeySize), &ms)) return -1;
  return ms;
}

grpc::Status ToGrpcWithRetryAfter(const absl::Status& status, grpc::CallbackServerContext* context) {
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    const int64_t ms = RetryAfterMs(std::string(status.message()));
    if (ms >= 0) context->AddTrailingMetadata("retry-after-ms", absl::StrCat(ms));
  }
  return bridge::ToGrpc(status);
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
