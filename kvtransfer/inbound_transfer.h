// The receiver's handle on one reserved transfer: per-layer progress, completion, failure.
// Implementations of KvTransport drive it; the decode worker waits on it.
// Thread-safety: all methods are safe from any thread.
#ifndef PDSERVE_KVTRANSFER_INBOUND_TRANSFER_H_
#define PDSERVE_KVTRANSFER_INBOUND_TRANSFER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pdserve::kvtransfer {

class InboundTransfer {
 public:
  InboundTransfer(uint64_t token, std::vector<int32_t> block_ids, int num_layers,
                  uint64_t expected_bytes);

  uint64_t token() const { return token_; }
  // The blocks the sender writes, in the pool the receiver serves: the expectation's, or,
  // through a staging transport, the staging blocks it leased for them.
  const std::vector<int32_t>& block_ids() const { return block_ids_; }
  int num_layers() const { return num_layers_; }
  // Layers the sender reported finished (advisory: only completion makes the data usable).
  int layers_done() const;
  bool done() const;
  // OK once the whole transfer is in the pool; the failure if it failed; DEADLINE_EXCEEDED
  // if neither happens within `timeout` (the transfer is left as it is).
  absl::Status Wait(absl::Duration timeout) const;
  // The final status, or UNAVAILABLE while still in progress.
  absl::Status status() const;
  absl::Time completed_at() const;
  // Receiver-side writes into the blocks still running (active-message data path, or a
  // staging transport's landing copy).
  int writes_in_flight() const;
  // Whether the expectation's blocks may still be written once this transfer has failed or
  // been released: always where the sender writes them itself (a one-sided put cannot be
  // recalled); with a staging transport only while its landing copy runs, since the sender
  // writes staging blocks and nothing lands after the transfer ended.
  bool ExpectedBlocksMayBeWritten() const;
  // Calls `fn` once when the transfer completes or fails (at once if it already has), on
  // whichever thread finished it: it must not block.
  void OnDone(std::function<void()> fn);

  // --- Called by transports. ---
  // The sender writes separate (staging) blocks; the expectation's are written only by
  // receiver-side copies, each bracketed by StartWriteUnlessDone/WriteFinished.
  void SetLandedByCopy();
  // WriteStarted, unless the transfer has already completed, failed or been released (then
  // false and nothing may be written).
  bool StartWriteUnlessDone();
  void LayerDone(int layer);
  void AddReceivedBytes(uint64_t bytes);
  void WriteStarted();
  void WriteFinished();
  // The sender says it is complete with `total_bytes` (0 when the data path does not count
  // bytes at the receiver, e.g. one-sided puts). Completes once the bytes are all in.
  void SenderComplete(uint64_t total_bytes);
  void Fail(absl::Status status);

 private:
  void MaybeCompleteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The done callback, if the transfer just finished (to call after unlocking).
  std::function<void()> TakeDoneCallbackLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t token_;
  const std::vector<int32_t> block_ids_;
  const int num_layers_;
  const uint64_t expected_bytes_;
  mutable absl::Mutex mu_;
  int layers_done_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t received_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool sender_complete_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t sender_total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int writes_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool landed_by_copy_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_) = absl::UnavailableError("transfer in progress");
  absl::Time completed_at_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_done_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_INBOUND_TRANSFER_H_
