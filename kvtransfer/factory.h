// Builds the product's KvTransport from configuration (the one place that knows the
// implementations). Today: UCX, paced by a modelled link when asked. The loopback and
// fault-injecting transports are built directly by tests. Thread-safety: stateless.
#ifndef PDSERVE_KVTRANSFER_FACTORY_H_
#define PDSERVE_KVTRANSFER_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/paced/paced_transport.h"
#include "kvtransfer/ucx/ucx_config.h"

namespace pdserve::kvtransfer {

struct KvTransportConfig {
  // "ucx". Default "ucx".
  std::string kind = "ucx";
  UcxTransportConfig ucx;
  // A modelled link's timing for every transfer (kvtransfer/paced/); off by default. The
  // emulated backend sets it from its profile.
  LinkEmulation link;
  absl::Status Validate() const;
};

absl::StatusOr<std::unique_ptr<KvTransport>> MakeKvTransport(const KvTransportConfig& config);

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_FACTORY_H_
