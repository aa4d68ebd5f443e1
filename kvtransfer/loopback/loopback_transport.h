// An in-process KvTransport for unit tests of the layers above the transport: senders and
// receivers that share a LoopbackFabric "connect" by address, and writes are memcpys into the
// receiver's pool that pass through the same ReceiverTable checks as the UCX data path.
// Thread-safety: all methods are safe from any thread.
#ifndef PDSERVE_KVTRANSFER_LOOPBACK_LOOPBACK_TRANSPORT_H_
#define PDSERVE_KVTRANSFER_LOOPBACK_LOOPBACK_TRANSPORT_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/receiver_table.h"

namespace pdserve::kvtransfer {

class LoopbackTransport;

// The shared "network" of loopback transports, keyed by address.
class LoopbackFabric {
 public:
  void Register(const std::string& address, LoopbackTransport* transport);
  void Unregister(const std::string& address);
  LoopbackTransport* Find(const std::string& address);

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, LoopbackTransport*> transports_ ABSL_GUARDED_BY(mu_);
};

class LoopbackTransport final : public KvTransport {
 public:
  LoopbackTransport(std::shared_ptr<LoopbackFabric> fabric, std::string address);
  ~LoopbackTransport() override;

  std::string name() const override { return "loopback"; }
  absl::StatusOr<std::unique_ptr<LocalPool>> CreatePool(const KvLayout& layout) override;
  absl::StatusOr<KvPoolDescriptor> ServePool(LocalPool* pool, const std::string& receiver_id,
                                             uint64_t model_fingerprint, uint64_t epoch) override;
  absl::StatusOr<std::shared_ptr<InboundTransfer>> Expect(const TransferExpectation& e) override;
  void Release(uint64_t token) override;
  absl::StatusOr<std::unique_ptr<OutboundTransfer>> Open(const TransferTarget& target,
                                                         LocalPool* source,
                                                         uint64_t source_fingerprint) override;
  TransportCounters counters() const override;

  // Receiver side of a loopback write (called by a sender's OutboundTransfer).
  absl::Status DeliverData(const DataHeader& header, const void* data, size_t bytes);
  absl::Status DeliverControl(const ControlHeader& header);

 private:
  friend class LoopbackOutbound;
  std::shared_ptr<LoopbackFabric> fabric_;
  std::string address_;
  ReceiverTable table_;
  std::atomic<LocalPool*> served_pool_{nullptr};
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> operations_posted_{0};
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_LOOPBACK_LOOPBACK_TRANSPORT_H_
