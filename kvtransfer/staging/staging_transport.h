// A KvTransport for a KV pool the inner transport cannot register (a pool in device memory;
// Debian's UCX 1.13 has no CUDA transports): the decorator presents the KV pool to its callers
// and moves every byte through a bounded pinned staging pool that the inner transport
// registered. Callers name KV-pool blocks only; staging is invisible to them.
//
// Sender: Open() leases staging blocks and returns a StagedOutboundTransfer: WriteLayer(l, kv
// blocks) enqueues layer l's KV -> staging copy and returns; the inner put follows once the
// copy completed (staged_transfer.h).
// Receiver: Expect(kv blocks) leases staging blocks and reserves them with the inner transport;
// the returned InboundTransfer lists the staging blocks (what the sender must write) and
// completes only after the inner transfer completed AND the staging -> KV copy landed. That
// copy is started and waited for on the decorator's own landing thread, so the caller (the
// decode engine loop) never waits on a copy. A landing copy counts as a write in flight on the
// InboundTransfer, and ExpectedBlocksMayBeWritten() is true only while one runs: after a
// failure or Release() before the copy started, the KV blocks were never written.
// The staging blocks are held as long as anyone holds the InboundTransfer (a receiver keeps it
// until the sender acknowledged it stopped writing), then return to the pool.
// Thread-safety: every method may be called from any thread.
#ifndef PDSERVE_KVTRANSFER_STAGING_STAGING_TRANSPORT_H_
#define PDSERVE_KVTRANSFER_STAGING_STAGING_TRANSPORT_H_

#include <deque>
#include <memory>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/staging/block_copier.h"
#include "kvtransfer/staging/staging_pool.h"
#include "kvtransfer/transport_wrapper.h"

namespace pdserve::kvtransfer {

struct StagingTransportOptions {
  // A landing copy not complete after this long fails its transfer (a wedged device); the
  // KV blocks stay counted as written until the copy really ends.
  absl::Duration copy_timeout = absl::Seconds(30);
};

class StagingTransport final : public KvTransportWrapper {
 public:
  // `inner` registered `staging_memory` (CreatePool); `copier` copies between the KV pool and
  // `staging_memory`; `leases` hands out `staging_memory`'s blocks. `kv_pool_blocks` bounds the
  // KV-pool block ids callers may name. None is owned; all must outlive the transport.
  StagingTransport(KvTransport* inner, LocalPool* staging_memory, BlockCopier* copier,
                   std::shared_ptr<StagingPool> leases, int kv_pool_blocks,
                   StagingTransportOptions options = {});
  // Stops the landing thread; transfers still landing then never complete.
  ~StagingTransport() override;

  std::string name() const override { return inner()->name() + "+staging"; }
  // `expectation.block_ids` are KV-pool blocks. RESOURCE_EXHAUSTED (naming the staging pool's
  // flag) when too few staging blocks are free; the inner transport's errors otherwise.
  absl::StatusOr<std::shared_ptr<InboundTransfer>> Expect(
      const TransferExpectation& expectation) override;
  // The inner reservation ends, and a landing copy not yet started never starts.
  void Release(uint64_t token) override;
  // `source` must be the staging memory (the pool the worker registered); the transfer's
  // WriteLayer takes KV-pool blocks. RESOURCE_EXHAUSTED when too few staging blocks are free.
  absl::StatusOr<std::unique_ptr<OutboundTransfer>> Open(const TransferTarget& target,
                                                         LocalPool* source,
                                                         uint64_t source_fingerprint) override;
  // A transfer larger than the whole staging pool can never be opened.
  absl::Status CheckTransferSize(size_t num_blocks) const override;

 private:
  struct Landing;
  class Lander;

  LocalPool* const staging_memory_;
  BlockCopier* const copier_;
  const std::shared_ptr<StagingPool> leases_;
  const int kv_pool_blocks_;
  const std::shared_ptr<Lander> lander_;
  absl::Mutex mu_;
  // Reservations not yet released, for Release() to stop their landing.
  absl::flat_hash_map<uint64_t, std::weak_ptr<Landing>> landings_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_STAGING_STAGING_TRANSPORT_H_
