// Checks a peer's UCX worker address and packed remote key before this process hands them to
// UCX. ucp_ep_create and ucp_ep_rkey_unpack take no length and trust their bytes: a forged or
// damaged descriptor (random bytes in a Prefill RPC's KvTarget) makes UCX read past the
// buffer or abort on an assertion, killing the process. So bytes never seen before are first
// unpacked by a disposable process (pdserve-kv-probe, beside the running binary) with the
// same transports; only if it survives and UCX accepted them does this process use them.
// Accepted bytes are remembered whole (a genuine peer is probed once per epoch; a hash would
// let a crafted collision skip the probe), rejected ones are not, and one probe runs at a
// time, so a flood of forged descriptors costs one short process each, in line.
//
// This rejects bytes UCX cannot parse. It cannot tell a well-formed but hostile descriptor
// (a real UCX peer lying about its pool's base address) from a genuine one: that trust comes
// from authenticating the caller (docs/security.md).
// Thread-safety: Check() may be called from any thread.
#ifndef PDSERVE_KVTRANSFER_UCX_PEER_ADDRESS_CHECK_H_
#define PDSERVE_KVTRANSFER_UCX_PEER_ADDRESS_CHECK_H_

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pdserve::kvtransfer {

struct PeerAddressCheckConfig {
  // The probe binary; a bare name is looked up beside the running executable (every pdserve
  // binary is built and installed into one directory).
  // Default "pdserve-kv-probe".
  std::string probe_binary = "pdserve-kv-probe";
  // UCX transports and devices the probe uses (the transport's own). Default "".
  std::string transports;
  std::string net_devices;
  // How long one probe may take before its bytes are rejected. Default 5 s.
  absl::Duration timeout = absl::Seconds(5);
  // Accepted (address, rkey) pairs remembered; a full cache is cleared. Default 256.
  int max_cached = 256;
};

// Size limits on the bytes before anything else looks at them (UCX 1.13's addresses over
// shared memory and TCP are a few hundred bytes; its remote keys tens).
inline constexpr size_t kMaxWorkerAddressBytes = 8192;
inline constexpr size_t kMaxPackedRkeyBytes = 8192;

class PeerAddressChecker {
 public:
  explicit PeerAddressChecker(PeerAddressCheckConfig config) : config_(std::move(config)) {}

  // OK when UCX can use `worker_address` and `packed_rkey` (the rkey may be empty: the
  // active-message path needs none). INVALID_ARGUMENT naming the field otherwise;
  // UNAVAILABLE when the probe itself could not run.
  absl::Status Check(const std::string& worker_address, const std::string& packed_rkey);

  // Probes run so far (tests: a known peer is not probed again).
  int probes_run() const;

 private:
  absl::Status Probe(const std::string& worker_address, const std::string& packed_rkey);

  const PeerAddressCheckConfig config_;
  mutable absl::Mutex mu_;  // Held across a probe: one at a time.
  absl::flat_hash_set<std::string> accepted_ ABSL_GUARDED_BY(mu_);  // Length-prefixed pairs.
  int probes_run_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_UCX_PEER_ADDRESS_CHECK_H_
