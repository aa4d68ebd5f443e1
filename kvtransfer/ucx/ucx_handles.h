// RAII owners of UCX handles a transport keeps per peer: an endpoint (closed with
// ucp_ep_close_nbx and progressed until the close completes or a bound passes) and an
// unpacked remote key (destroyed before its endpoint). Both are created, used and destroyed
// on the owning UcxWorkerThread.
// Thread-safety: worker thread only.
#ifndef PDSERVE_KVTRANSFER_UCX_UCX_HANDLES_H_
#define PDSERVE_KVTRANSFER_UCX_UCX_HANDLES_H_

#include <ucp/api/ucp.h>

#include "absl/time/time.h"
#include "kvtransfer/ucx/worker_thread.h"

namespace pdserve::kvtransfer {

class UcxEndpoint {
 public:
  UcxEndpoint() = default;
  // Takes ownership of `ep`, to be closed on `thread` (a peer that is gone never confirms a
  // close, so its progress is bounded by `close_timeout`).
  UcxEndpoint(ucp_ep_h ep, UcxWorkerThread* thread,
              absl::Duration close_timeout = absl::Milliseconds(500))
      : ep_(ep), thread_(thread), close_timeout_(close_timeout) {}
  ~UcxEndpoint() { Close(); }
  UcxEndpoint(UcxEndpoint&& other) noexcept { *this = std::move(other); }
  UcxEndpoint& operator=(UcxEndpoint&& other) noexcept;
  UcxEndpoint(const UcxEndpoint&) = delete;
  UcxEndpoint& operator=(const UcxEndpoint&) = delete;

  ucp_ep_h get() const { return ep_; }
  explicit operator bool() const { return ep_ != nullptr; }
  // Closes now (idempotent).
  void Close();

 private:
  ucp_ep_h ep_ = nullptr;
  UcxWorkerThread* thread_ = nullptr;
  absl::Duration close_timeout_;
};

class UcxRemoteKey {
 public:
  UcxRemoteKey() = default;
  explicit UcxRemoteKey(ucp_rkey_h rkey) : rkey_(rkey) {}
  ~UcxRemoteKey() { Reset(); }
  UcxRemoteKey(UcxRemoteKey&& other) noexcept : rkey_(other.rkey_) { other.rkey_ = nullptr; }
  UcxRemoteKey& operator=(UcxRemoteKey&& other) noexcept {
    if (this != &other) {
      Reset();
      rkey_ = other.rkey_;
      other.rkey_ = nullptr;
    }
    return *this;
  }
  UcxRemoteKey(const UcxRemoteKey&) = delete;
  UcxRemoteKey& operator=(const UcxRemoteKey&) = delete;

  ucp_rkey_h get() const { return rkey_; }
  void Reset() {
    if (rkey_ != nullptr) ucp_rkey_destroy(rkey_);
    rkey_ = nullptr;
  }

 private:
  ucp_rkey_h rkey_ = nullptr;
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_UCX_UCX_HANDLES_H_
