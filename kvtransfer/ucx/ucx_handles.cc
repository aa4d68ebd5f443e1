#include "kvtransfer/ucx/ucx_handles.h"

namespace pdserve::kvtransfer {

UcxEndpoint& UcxEndpoint::operator=(UcxEndpoint&& other) noexcept {
  if (this != &other) {
    Close();
    ep_ = other.ep_;
    thread_ = other.thread_;
    close_timeout_ = other.close_timeout_;
    other.ep_ = nullptr;
  }
  return *this;
}

void UcxEndpoint::Close() {
  if (ep_ == nullptr) return;
  ucp_request_param_t param{};
  ucs_status_ptr_t request = ucp_ep_close_nbx(ep_, &param);
  ep_ = nullptr;
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  thread_->ProgressUntil([request] { return ucp_request_check_status(request) != UCS_INPROGRESS; },
                         close_timeout_);
  // A close that never completed stays with UCX (freed when the worker is destroyed).
  if (ucp_request_check_status(request) != UCS_INPROGRESS) ucp_request_free(request);
}

}  // namespace pdserve::kvtransfer
