// KV-cache transfer between processes: a prefill worker (sender) writes a prompt's KV,
// layer by layer, straight into blocks of a decode worker's (receiver's) paged pool.
//
// Receiver: CreatePool() allocates and registers the pool (the engine wraps the memory),
// ServePool() exports a KvPoolDescriptor (address, packed rkey, base, layout, epoch) that
// travels to the sender inside a KvTarget, Expect() reserves one transfer (a one-time token
// and the destination blocks) and returns an InboundTransfer handle to wait on.
// Sender: Open() a transfer to a target from its own registered pool, WriteLayer() as each
// layer is computed (non-blocking), Finish() once the last layer is written (returns after
// the data is complete at the receiver and the completion was sent), or Abort().
//
// Peer failure: UCX 1.13 loses shared memory under peer error handling, so a dead or stuck
// peer is detected by the control plane (deadlines on every wait, the gRPC call between the
// workers, explicit aborts), never by waiting on the transport forever.
// Thread-safety: every method may be called from any thread.
#ifndef PDSERVE_KVTRANSFER_KV_TRANSPORT_H_
#define PDSERVE_KVTRANSFER_KV_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/kv_layout.h"
#include "kvtransfer/inbound_transfer.h"

namespace pdserve::kvtransfer {

// What a receiver publishes about its pool: enough for a sender to write into it. Travels in
// the KvTarget message.
struct KvPoolDescriptor {
  std::string receiver_id;
  std::string worker_address;  // Transport-specific, opaque.
  std::string packed_rkey;     // Transport-specific, opaque.
  uint64_t base_address = 0;
  KvLayout layout;
  uint64_t model_fingerprint = 0;
  uint64_t epoch = 0;
};

// Receiver: one reservation.
struct TransferExpectation {
  uint64_t token = 0;              // One-time, chosen by the receiver.
  std::vector<int32_t> block_ids;  // Destination blocks, in position order.
  int num_layers = 0;              // Layers the sender will write (normally all).
};

// Sender: where to write.
struct TransferTarget {
  KvPoolDescriptor pool;
  uint64_t token = 0;
  std::vector<int32_t> block_ids;
};

// Memory registered with the transport: a receiver's pool, or a sender's source pool.
// The transport keeps its registration; the owner must destroy transfers that use it first.
class LocalPool {
 public:
  virtual ~LocalPool() = default;
  virtual void* base() const = 0;
  virtual size_t bytes() const = 0;
  virtual const KvLayout& layout() const = 0;
};

// Which data path a transport uses towards a peer.
enum class DataPath { kPut, kActiveMessage, kMemcpy };
const char* DataPathName(DataPath path);

struct TransportCounters {
  uint64_t transfers_completed = 0;
  uint64_t transfers_failed = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t operations_posted = 0;  // Puts or data messages after coalescing.
  uint64_t rejected_unknown_token = 0;
  uint64_t rejected_stale_epoch = 0;
  uint64_t rejected_duplicate = 0;
  uint64_t rejected_bad_blocks = 0;
  uint64_t rejected_layout = 0;
  uint64_t rejected_reservation_conflict = 0;
};

class OutboundTransfer {
 public:
  virtual ~OutboundTransfer() = default;
  // Posts layer `layer`'s K and V for every block, from `source_blocks` of the source pool
  // (same count as the target's blocks). Returns at once; the data moves in the background.
  virtual absl::Status WriteLayer(int layer, absl::Span<const int32_t> source_blocks) = 0;
  // After the last WriteLayer: waits until every write is complete at the receiver, sends the
  // completion, and returns. DEADLINE_EXCEEDED if that takes longer than `timeout`.
  virtual absl::Status Finish(absl::Duration timeout) = 0;
  // Stops writing. Returns OK once no write of this transfer can land any more (the
  // acknowledgement the receiver's quarantine waits for), DEADLINE_EXCEEDED otherwise.
  virtual absl::Status Abort(absl::Duration timeout) = 0;
  virtual int layers_written() const = 0;
  virtual uint64_t bytes_written() const = 0;
  virtual DataPath data_path() const = 0;
};

class KvTransport {
 public:
  virtual ~KvTransport() = default;
  virtual std::string name() const = 0;

  // Allocates and registers a pool of `layout.pool_bytes()` (page aligned, zeroed).
  virtual absl::StatusOr<std::unique_ptr<LocalPool>> CreatePool(const KvLayout& layout) = 0;

  // Receiver: makes `pool` the target of incoming transfers (one per transport) and returns
  // its descriptor. `epoch` changes when the receiving process restarts.
  virtual absl::StatusOr<KvPoolDescriptor> ServePool(LocalPool* pool,
                                                     const std::string& receiver_id,
                                                     uint64_t model_fingerprint,
                                                     uint64_t epoch) = 0;
  // Receiver: reserves a transfer. INVALID_ARGUMENT for bad block ids or layer counts,
  // ALREADY_EXISTS for a reused token, FAILED_PRECONDITION when a block is already reserved
  // by another transfer.
  virtual absl::StatusOr<std::shared_ptr<InboundTransfer>> Expect(
      const TransferExpectation& expectation) = 0;
  // Receiver: forgets a reservation (its blocks may be reserved again). Data for the token
  // that arrives later is rejected, never written.
  virtual void Release(uint64_t token) = 0;

  // Sender: opens a transfer from `source` (a pool created by this transport) to `target`.
  // FAILED_PRECONDITION when the layouts' geometry or the model fingerprints differ (nothing
  // is written); INVALID_ARGUMENT for block ids outside either pool.
  virtual absl::StatusOr<std::unique_ptr<OutboundTransfer>> Open(const TransferTarget& target,
                                                                 LocalPool* source,
                                                                 uint64_t source_fingerprint) = 0;

  virtual TransportCounters counters() const = 0;

  // Sender: OK if a transfer of `num_blocks` blocks can ever be opened here (RESOURCE_EXHAUSTED
  // naming the limit otherwise), so that a job too large is refused before any compute. Only
  // a transport with a bounded intermediate pool (staging) has such a limit.
  virtual absl::Status CheckTransferSize(size_t /*num_blocks*/) const { return absl::OkStatus(); }
};

// Checks a sender's side of the handshake: same geometry, same model, blocks in range.
absl::Status ValidateTarget(const TransferTarget& target, const KvLayout& source_layout,
                            uint64_t source_fingerprint);

// Runs of consecutive (source, destination) block pairs: one operation each.
struct BlockRun {
  int32_t source_first;
  int32_t target_first;
  int32_t count;
};
std::vector<BlockRun> CoalesceRuns(absl::Span<const int32_t> source_blocks,
                                   absl::Span<const int32_t> target_blocks);

// Stable hash of a block list, carried in completions so the receiver can check them.
uint64_t HashBlocks(absl::Span<const int32_t> blocks);
// Stable hash of a layout's geometry (not num_blocks) and fingerprint.
uint64_t HashLayout(const KvLayout& layout, uint64_t fingerprint);

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_KV_TRANSPORT_H_
