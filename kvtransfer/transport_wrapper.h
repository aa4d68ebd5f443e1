// The base of KvTransport decorators (as leveldb's EnvWrapper): every call goes to the inner
// transport; a decorator overrides what it changes (the fault-injecting transport and the
// paced one change only the transfers they open).
// Thread-safety: as the inner transport.
#ifndef PDSERVE_KVTRANSFER_TRANSPORT_WRAPPER_H_
#define PDSERVE_KVTRANSFER_TRANSPORT_WRAPPER_H_

#include <memory>
#include <string>

#include "kvtransfer/kv_transport.h"

namespace pdserve::kvtransfer {

class KvTransportWrapper : public KvTransport {
 public:
  // `inner` is not owned and must outlive the wrapper.
  explicit KvTransportWrapper(KvTransport* inner) : inner_(inner) {}

  std::string name() const override { return inner_->name(); }
  absl::StatusOr<std::unique_ptr<LocalPool>> CreatePool(const KvLayout& layout) override {
    return inner_->CreatePool(layout);
  }
  absl::StatusOr<KvPoolDescriptor> ServePool(LocalPool* pool, const std::string& receiver_id,
                                             uint64_t fingerprint, uint64_t epoch) override {
    return inner_->ServePool(pool, receiver_id, fingerprint, epoch);
  }
  absl::StatusOr<std::shared_ptr<InboundTransfer>> Expect(const TransferExpectation& e) override {
    return inner_->Expect(e);
  }
  void Release(uint64_t token) override { inner_->Release(token); }
  absl::StatusOr<std::unique_ptr<OutboundTransfer>> Open(const TransferTarget& target,
                                                         LocalPool* source,
                                                         uint64_t source_fingerprint) override {
    return inner_->Open(target, source, source_fingerprint);
  }
  TransportCounters counters() const override { return inner_->counters(); }
  absl::Status CheckTransferSize(size_t num_blocks) const override {
    return inner_->CheckTransferSize(num_blocks);
  }

 protected:
  KvTransport* inner() const { return inner_; }

 private:
  KvTransport* const inner_;
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_TRANSPORT_WRAPPER_H_
