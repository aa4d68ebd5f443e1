#include "kvtransfer/ucx/ucx_status.h"

#include "absl/strings/str_cat.h"

namespace pdserve::kvtransfer {

absl::Status FromUcs(ucs_status_t status, absl::string_view what) {
  if (status == UCS_OK) return absl::OkStatus();
  const std::string message = absl::StrCat("ucx: ", what, ": ", ucs_status_string(status));
  switch (status) {
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
      return absl::ResourceExhaustedError(message);
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      return absl::InvalidArgumentError(message);
    case UCS_ERR_CANCELED:
      return absl::CancelledError(message);
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return absl::DeadlineExceededError(message);
    case UCS_ERR_REJECTED:
      return absl::PermissionDeniedError(message);
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NOT_CONNECTED:
      return absl::UnavailableError(message);
    case UCS_ERR_UNSUPPORTED:
      return absl::UnimplementedError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace pdserve::kvtransfer
