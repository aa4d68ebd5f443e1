// Conversion of UCX status codes to absl::Status (the code that first sees a UCX error
// classifies it here and adds what it was doing).
// Thread-safety: stateless.
#ifndef PDSERVE_KVTRANSFER_UCX_UCX_STATUS_H_
#define PDSERVE_KVTRANSFER_UCX_UCX_STATUS_H_

#include <ucp/api/ucp.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pdserve::kvtransfer {

absl::Status FromUcs(ucs_status_t status, absl::string_view what);

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_UCX_UCX_STATUS_H_
