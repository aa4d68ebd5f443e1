// The connection greeting of the active-message path (kvtransfer/wire.h: a sender waits for
// a new receiver's answer before its first data, so that its death cannot leave the
// receiver's UCX wireup reply queued, which UCX 1.13 aborts on). Part of UcxTransport.
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "kvtransfer/ucx/ucx_status.h"
#include "kvtransfer/ucx/ucx_transport.h"

namespace pdserve::kvtransfer {

ucs_status_ptr_t UcxTransport::SendHello(ucp_ep_h ep, unsigned id, const HelloHeader& header,
                                         uint32_t flags) {
  auto pending = std::make_unique<PendingHello>(PendingHello{this, header});
  PendingHello* raw = pending.get();
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = flags | UCP_AM_SEND_FLAG_EAGER;
  param.cb.send = [](void* request, ucs_status_t, void* user_data) {
    auto* done = static_cast<PendingHello*>(user_data);
    done->transport->pending_hellos_.erase(done);
    ucp_request_free(request);
  };
  param.user_data = raw;
  const ucs_status_ptr_t request =
      ucp_am_send_nbx(ep, id, &raw->header, sizeof(HelloHeader), nullptr, 0, &param);
  // Completed at once (no callback then) or failed: nothing stays pending.
  if (request != nullptr && !UCS_PTR_IS_ERR(request)) pending_hellos_[raw] = std::move(pending);
  return request;
}

absl::Status UcxTransport::Greet(ucp_ep_h ep, const std::string& receiver_id) {
  HelloHeader hello;
  do {
    hello.nonce = hello_rng_();
  } while (hello.nonce == 0);
  // REPLY: the receiver's handler gets the endpoint towards this sender to answer on.
  const ucs_status_ptr_t request = SendHello(ep, kAmHello, hello, UCP_AM_SEND_FLAG_REPLY);
  if (UCS_PTR_IS_ERR(request))
    return FromUcs(UCS_PTR_STATUS(request), absl::StrCat("greet ", receiver_id));
  const bool answered = thread_->ProgressUntil(
      [&] { return hello_answers_.erase(hello.nonce) > 0; }, config_.handshake_timeout);
  if (!answered) {
    return absl::UnavailableError(absl::StrCat("kv transfer: ", receiver_id,
                                               " did not answer the greeting within ",
                                               absl::FormatDuration(config_.handshake_timeout)));
  }
  return absl::OkStatus();
}

ucs_status_t UcxTransport::OnHello(void* arg, const void* header, size_t header_length, void*,
                                   size_t, const ucp_am_recv_param_t* param) {
  auto h = ParseHeader<HelloHeader>(header, header_length);
  if (!h.has_value() || (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0 ||
      param->reply_ep == nullptr) {
    PDS_LOG_EVERY_N_SEC(WARNING, 5) << "kv receiver: malformed greeting";
    return UCS_OK;
  }
  // Answered from inside the callback: the reply endpoint is UCX's, valid here. Queued behind
  // this worker's own wireup reply to the sender on the same endpoint, if that still waits.
  static_cast<UcxTransport*>(arg)->SendHello(param->reply_ep, kAmHelloAck, *h, 0);
  return UCS_OK;
}

ucs_status_t UcxTransport::OnHelloAck(void* arg, const void* header, size_t header_length, void*,
                                      size_t, const ucp_am_recv_param_t*) {
  auto h = ParseHeader<HelloHeader>(header, header_length);
  if (h.has_value()) static_cast<UcxTransport*>(arg)->hello_answers_.insert(h->nonce);
  return UCS_OK;
}

}  // namespace pdserve::kvtransfer
