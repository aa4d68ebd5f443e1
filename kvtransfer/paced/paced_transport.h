// A KvTransport decorator that gives the transfers it opens a modelled link's timing: each
// layer a sender writes occupies one shared link for (its bytes x byte_scale) / bytes_per_ms,
// in the order written, and the completion reaches the receiver latency_ms after the last
// layer's modelled end. The data itself moves through the inner transport at once (real bytes,
// checked as always); only Finish() waits for the modelled time before sending the completion.
//
// Used by the emulated backend (engine/emulated/), whose KV bytes are a small stand-in for a
// real model's: byte_scale is the profile's bytes per token over the emulated ones, so a
// transfer takes the time the profile's link would take for the real KV (the simulator's
// layer-wise link, sim/sim_prefill_worker.h). The receiver side passes straight through.
// Thread-safety: safe from any thread; the link is shared by every transfer of the transport.
#ifndef PDSERVE_KVTRANSFER_PACED_PACED_TRANSPORT_H_
#define PDSERVE_KVTRANSFER_PACED_PACED_TRANSPORT_H_

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/transport_wrapper.h"

namespace pdserve::kvtransfer {

struct LinkEmulation {
  // The modelled link's bandwidth; 0: no pacing (the transport is used as it is).
  double bytes_per_ms = 0;
  // From a layer's last byte leaving to it being visible at the receiver.
  double latency_ms = 0;
  // How many modelled bytes each real byte stands for (>= 1 in practice).
  double byte_scale = 1;
  bool enabled() const { return bytes_per_ms > 0; }
  absl::Status Validate() const;
};

class PacedTransport final : public KvTransportWrapper {
 public:
  // `clock` null: the real clock.
  PacedTransport(std::unique_ptr<KvTransport> inner, const LinkEmulation& link,
                 Clock* clock = nullptr);

  std::string name() const override { return "paced(" + inner()->name() + ")"; }
  absl::StatusOr<std::unique_ptr<OutboundTransfer>> Open(const TransferTarget& target,
                                                         LocalPool* source,
                                                         uint64_t source_fingerprint) override;

  // Reserves the link for `real_bytes` written now: returns when their modelled last byte
  // leaves (the link is busy until then).
  absl::Time Occupy(double real_bytes);
  const LinkEmulation& link() const { return link_; }
  Clock* clock() const { return clock_; }

 private:
  const std::unique_ptr<KvTransport> owned_;
  const LinkEmulation link_;
  Clock* const clock_;
  absl::Mutex mu_;
  absl::Time link_free_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_PACED_PACED_TRANSPORT_H_
