// KvTransport over UCX (UCP). One context and one worker per transport, owned by a
// UcxWorkerThread. Pools are allocated by UCX (UCP_MEM_MAP_ALLOCATE: shared-memory backed,
// the fast path for same-host puts; bench/README.md, transfer-raw) and registered once; rkeys are
// packed once; endpoints and unpacked rkeys are cached per peer and epoch.
//
// Data path, chosen per peer from what the endpoint's lanes can do natively:
//  - put: one-sided ucp_put_nbx into the receiver's pool where the transport does RMA
//    (shared memory, RDMA); a flush then a COMPLETE control message.
//  - am: where UCX would only emulate put (TCP: ~5x slower, bench/README.md, transfer-raw), each
//    coalesced run is an active message whose payload the receiver pulls with a zero-copy
//    rendezvous straight into the pool offset; the receiver counts the bytes.
// Endpoints are created with UCP_ERR_HANDLING_MODE_NONE (shared memory disappears under
// PEER mode in UCX 1.13) except on the active-message path (TCP), where PEER mode keeps a
// dead peer from being fatal, and where a sender greets a new receiver and waits for its
// answer before the first data (wire.h: a sender dying while the receiver's wireup reply
// still waits would abort the receiver).
// A peer's descriptor arrives in an RPC: its address and rkey are checked by a disposable
// process before this one unpacks them (peer_address_check.h).
// Thread-safety: all public methods are safe from any thread.
#ifndef PDSERVE_KVTRANSFER_UCX_UCX_TRANSPORT_H_
#define PDSERVE_KVTRANSFER_UCX_UCX_TRANSPORT_H_

#include <ucp/api/ucp.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/receiver_table.h"
#include "kvtransfer/ucx/peer_address_check.h"
#include "kvtransfer/ucx/ucx_config.h"
#include "kvtransfer/ucx/worker_thread.h"
#include "kvtransfer/wire.h"

namespace pdserve::kvtransfer {

class UcxTransport final : public KvTransport {
 public:
  static absl::StatusOr<std::unique_ptr<UcxTransport>> Create(const UcxTransportConfig& config);
  // Pools and transfers created by this transport must be destroyed first.
  ~UcxTransport() override;

  std::string name() const override { return "ucx"; }
  absl::StatusOr<std::unique_ptr<LocalPool>> CreatePool(const KvLayout& layout) override;
  absl::StatusOr<KvPoolDescriptor> ServePool(LocalPool* pool, const std::string& receiver_id,
                                             uint64_t model_fingerprint, uint64_t epoch) override;
  absl::StatusOr<std::shared_ptr<InboundTransfer>> Expect(const TransferExpectation& e) override;
  void Release(uint64_t token) override;
  absl::StatusOr<std::unique_ptr<OutboundTransfer>> Open(const TransferTarget& target,
                                                         LocalPool* source,
                                                         uint64_t source_fingerprint) override;
  TransportCounters counters() const override;

  // The data path the transport would use towards the peer behind `descriptor` (opens the
  // endpoint if needed). For tests and the benchmark.
  absl::StatusOr<DataPath> PathTo(const KvPoolDescriptor& descriptor);

 private:
  class Pool;
  class Outbound;
  struct OutboundState;
  struct Peer;
  struct OpContext;
  // A greeting or its answer in flight (ucx_greeting.cc). UCX 1.13 does not copy an active
  // message's header, so it lives here until the send completes; what is still pending when
  // the worker goes is freed with the transport.
  struct PendingHello {
    UcxTransport* transport = nullptr;
    HelloHeader header;
  };

  explicit UcxTransport(UcxTransportConfig config);
  absl::StatusOr<Peer*> GetPeer(const KvPoolDescriptor& descriptor);  // Worker thread only.
  // FindPeer, or a checked descriptor connected on the worker thread. Any thread.
  absl::StatusOr<Peer*> Connect(const KvPoolDescriptor& descriptor);
  Peer* FindPeer(const KvPoolDescriptor& descriptor) const;  // Any thread.
  // Worker thread only (at shutdown, while thread_ is already being reset).
  void ClosePeers(UcxWorkerThread* thread);
  void StartReceive(void* descriptor, ReceiverTable::DataDestination destination);
  // Active-message path: greets a new receiver over `ep` and waits for its answer (wire.h).
  // Worker thread only.
  absl::Status Greet(ucp_ep_h ep, const std::string& receiver_id);
  // Sends a greeting or its answer (eager; `flags` added); worker thread only.
  ucs_status_ptr_t SendHello(ucp_ep_h ep, unsigned id, const HelloHeader& header, uint32_t flags);

  static ucs_status_t OnDataMessage(void* arg, const void* header, size_t header_length, void* data,
                                    size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnControlMessage(void* arg, const void* header, size_t header_length,
                                       void* data, size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnHello(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnHelloAck(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param);

  UcxTransportConfig config_;
  ucp_context_h context_ = nullptr;
  std::unique_ptr<PeerAddressChecker> address_checker_;
  std::unique_ptr<UcxWorkerThread> thread_;
  ReceiverTable table_;
  std::atomic<Pool*> served_pool_{nullptr};
  // Created and destroyed on the worker thread; looked up from any thread (under peers_mu_)
  // so that opening a transfer to a known peer needs no round trip to the worker thread.
  mutable absl::Mutex peers_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Peer>> peers_ ABSL_GUARDED_BY(peers_mu_);
  std::vector<std::unique_ptr<Peer>> retired_peers_;  // Worker thread only.
  // Greetings answered, by nonce, until the greeter takes its own (worker thread only).
  absl::flat_hash_set<uint64_t> hello_answers_;
  // Greetings and answers whose sends have not completed (worker thread only).
  absl::flat_hash_map<PendingHello*, std::unique_ptr<PendingHello>> pending_hellos_;
  std::mt19937_64 hello_rng_{std::random_device{}()};  // Worker thread only.
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> operations_posted_{0};
  std::atomic<uint64_t> send_failures_{0};
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_UCX_UCX_TRANSPORT_H_
