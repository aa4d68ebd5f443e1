// A KvTransport decorator that injects faults into the transfers it opens (as leveldb's
// EnvWrapper or Mooncake's FaultProxyTransport do), to exercise the decode worker's fallback
// and quarantine paths without hardware: fail after N layer writes, delay writes, drop or
// duplicate the completion. The receiver side passes straight through.
// Thread-safety: safe from any thread; SetPlan applies to transfers opened afterwards.
#ifndef PDSERVE_KVTRANSFER_TESTING_FAULT_INJECTING_TRANSPORT_H_
#define PDSERVE_KVTRANSFER_TESTING_FAULT_INJECTING_TRANSPORT_H_

#include <atomic>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/transport_wrapper.h"

namespace pdserve::kvtransfer {

struct FaultPlan {
  // Each transfer's first N WriteLayer calls succeed; later ones fail with UNAVAILABLE and
  // write nothing. -1: never.
  int fail_after_writes = -1;
  // Sleep before each WriteLayer (a slow link or a stalled sender).
  absl::Duration write_delay = absl::ZeroDuration();
  // Finish() returns OK without sending the completion: the receiver waits in vain.
  bool drop_completion = false;
  // Finish() sends the completion twice: the receiver must reject the second.
  bool duplicate_completion = false;
};

class FaultInjectingTransport final : public KvTransportWrapper {
 public:
  // `inner` is not owned and must outlive this decorator.
  FaultInjectingTransport(KvTransport* inner, FaultPlan plan)
      : KvTransportWrapper(inner), plan_(plan) {}

  void SetPlan(const FaultPlan& plan);
  FaultPlan plan() const;
  uint64_t injected_failures() const { return injected_failures_.load(); }

  std::string name() const override { return "fault(" + inner()->name() + ")"; }
  absl::StatusOr<std::unique_ptr<OutboundTransfer>> Open(const TransferTarget& target,
                                                         LocalPool* source,
                                                         uint64_t source_fingerprint) override;

 private:
  friend class FaultyOutbound;
  mutable absl::Mutex mu_;
  FaultPlan plan_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> injected_failures_{0};
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_TESTING_FAULT_INJECTING_TRANSPORT_H_
