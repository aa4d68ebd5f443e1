// How the UCX transport is configured, and how to build one, without UCX's headers: the rest
// of the tree (the factory, the workers' flags) sees only this and KvTransport.
// Thread-safety: a plain value type; MakeUcxTransport is reentrant.
#ifndef PDSERVE_KVTRANSFER_UCX_UCX_CONFIG_H_
#define PDSERVE_KVTRANSFER_UCX_UCX_CONFIG_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kvtransfer/kv_transport.h"

namespace pdserve::kvtransfer {

struct UcxTransportConfig {
  // UCX transports, as UCX_TLS: "shm", "tcp", "sm,tcp", ... Empty: UCX's default (which
  // honours a UCX_TLS environment variable). Default "".
  std::string transports;
  // Network devices, as UCX_NET_DEVICES: "lo", "eth0", "mlx5_0:1". Empty: all. Default "".
  std::string net_devices;
  // "auto" (put where RMA is native, active messages where it is emulated), "put" or "am".
  // Default "auto".
  std::string data_path = "auto";
  // Bound on calls into the worker thread (pool registration, endpoint setup). Default 10 s.
  absl::Duration call_timeout = absl::Seconds(10);
  // How long a sender on the active-message path (TCP) waits for a new receiver to answer
  // its greeting before the transfer fails (wire.h: the greeting keeps a sender's death from
  // aborting the receiver). The caller's wait is also bounded by call_timeout. Default 5 s.
  absl::Duration handshake_timeout = absl::Seconds(5);
  // Mapping a pool may take call_timeout plus this per GiB of pool. Default 60 s.
  absl::Duration pool_fill_time_per_gib = absl::Seconds(60);
  // Whether a new pool's memory is written through at creation (zeros over every page), so
  // that it is committed at start: a host without the memory fails then, not mid-serving.
  // Off, only pages an allocator handed back dirty are zeroed and the rest stays unbacked
  // until used (the emulated backend's stand-in pool, mostly untouched). Default true.
  bool commit_pool = true;
  // Testing: the UCX thread waits this long before mapping a pool (a slow mapping). Default 0.
  absl::Duration testing_pool_map_delay = absl::ZeroDuration();
  // How long the worker thread keeps polling after activity before it sleeps on the event
  // fd. Spinning lowers latency when the thread has a core of its own, and hurts when it
  // does not (2-core machines: measured in bench/README.md). Default 0.
  absl::Duration worker_spin = absl::ZeroDuration();
  // The process that checks a new peer's address and rkey before this one unpacks them
  // (peer_address_check.h). Default "pdserve-kv-probe", beside the running binary.
  std::string address_probe = "pdserve-kv-probe";

  absl::Status Validate() const;
};

// A UcxTransport (ucx_transport.h) as a KvTransport.
absl::StatusOr<std::unique_ptr<KvTransport>> MakeUcxTransport(const UcxTransportConfig& config);

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_UCX_UCX_CONFIG_H_
