// KV transfers through pinned host staging, for a KV pool in device memory that the transport
// cannot register (docs/cuda.md, "The GPU data path").
//
// Sender: StagedOutboundTransfer is an OutboundTransfer over device blocks. WriteLayer(l)
// enqueues layer l's device -> staging copy and returns; a poster thread waits for that copy
// and then posts the inner (host-to-host, registered) transfer's WriteLayer(l) from the
// staging blocks. The copy of layer l overlaps the compute of layer l + 1, and a layer is
// never put before its copy completed. Finish/Abort keep the OutboundTransfer contract.
// The receiver's side, and the leases of both sides, are StagingTransport's
// (staging_transport.h), which opens these transfers.
// Thread-safety: as OutboundTransfer (any thread).
#ifndef PDSERVE_KVTRANSFER_STAGING_STAGED_TRANSFER_H_
#define PDSERVE_KVTRANSFER_STAGING_STAGED_TRANSFER_H_

#include <deque>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "kvtransfer/inbound_transfer.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/staging/block_copier.h"
#include "kvtransfer/staging/staging_pool.h"

namespace pdserve::kvtransfer {

class StagedOutboundTransfer final : public OutboundTransfer {
 public:
  // `inner` writes from the staging pool the lease's blocks belong to; `copier` must outlive
  // the transfer.
  StagedOutboundTransfer(std::unique_ptr<OutboundTransfer> inner, BlockCopier* copier,
                         StagingLease lease);
  ~StagedOutboundTransfer() override;

  // `source_blocks` are device blocks, as many as the lease holds.
  absl::Status WriteLayer(int layer, absl::Span<const int32_t> source_blocks) override;
  absl::Status Finish(absl::Duration timeout) override;
  absl::Status Abort(absl::Duration timeout) override;
  int layers_written() const override { return inner_->layers_written(); }
  uint64_t bytes_written() const override { return inner_->bytes_written(); }
  DataPath data_path() const override { return inner_->data_path(); }

  // Layers whose copy completed and whose put was posted (for tests and metrics).
  int layers_posted() const;

 private:
  struct PendingLayer {
    int layer;
    uint64_t ticket;
  };
  void PostLoop();
  // Waits until the poster has nothing queued or in hand, or `deadline`.
  bool WaitDrained(absl::Time deadline);

  const std::unique_ptr<OutboundTransfer> inner_;
  BlockCopier* const copier_;
  StagingLease lease_;
  mutable absl::Mutex mu_;
  std::deque<PendingLayer> queue_ ABSL_GUARDED_BY(mu_);
  bool posting_ ABSL_GUARDED_BY(mu_) = false;  // The poster holds a layer.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  uint64_t last_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  bool any_copy_ ABSL_GUARDED_BY(mu_) = false;
  int layers_posted_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread poster_;
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_STAGING_STAGED_TRANSFER_H_
