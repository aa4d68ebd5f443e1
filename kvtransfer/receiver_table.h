// The receiver's book of reservations, shared by every KvTransport implementation: which
// blocks belong to which transfer token, and the checks every incoming message passes
// before anything is written or accepted (token issued for exactly these blocks, current
// epoch, matching layout, no double reservation, no duplicate completion). Rejections are
// counted.
// Thread-safety: all methods are safe from any thread.
#ifndef PDSERVE_KVTRANSFER_RECEIVER_TABLE_H_
#define PDSERVE_KVTRANSFER_RECEIVER_TABLE_H_

#include <cstdint>
#include <deque>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/wire.h"

namespace pdserve::kvtransfer {

class ReceiverTable {
 public:
  // Serving starts with a layout, a model fingerprint and an epoch.
  void Serve(const KvLayout& layout, uint64_t fingerprint, uint64_t epoch);
  bool serving() const;
  uint64_t epoch() const;

  // `count_bytes`: the data path delivers bytes through the receiver (active messages), so
  // completion waits for them; one-sided puts do not.
  absl::StatusOr<std::shared_ptr<InboundTransfer>> Expect(const TransferExpectation& expectation,
                                                          bool count_bytes);
  void Release(uint64_t token);

  // Validates a data run. On success returns the transfer and the byte offset in the pool to
  // write to; the caller must call InboundTransfer::WriteFinished (after WriteStarted, done
  // here) once the bytes are in.
  struct DataDestination {
    std::shared_ptr<InboundTransfer> transfer;
    size_t pool_offset;
    size_t bytes;
  };
  absl::StatusOr<DataDestination> AcceptData(const DataHeader& header, size_t payload_bytes);
  // Validates and applies a control message.
  absl::Status AcceptControl(const ControlHeader& header);

  void AddCounters(TransportCounters* counters) const;

 private:
  struct Reservation {
    std::shared_ptr<InboundTransfer> transfer;
    absl::flat_hash_set<int32_t> blocks;
    uint64_t blocks_hash;
    bool completed = false;
  };
  absl::Status CheckCommon(uint64_t token, uint64_t epoch, uint64_t layout_hash, Reservation** out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RememberFinished(uint64_t token) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  KvLayout layout_ ABSL_GUARDED_BY(mu_);
  uint64_t fingerprint_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t layout_hash_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, Reservation> reservations_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int32_t, uint64_t> block_owner_ ABSL_GUARDED_BY(mu_);
  // Tokens that were completed or released recently: a later message for one of them is a
  // duplicate, not an unknown token.
  absl::flat_hash_set<uint64_t> finished_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> finished_order_ ABSL_GUARDED_BY(mu_);
  TransportCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_RECEIVER_TABLE_H_
