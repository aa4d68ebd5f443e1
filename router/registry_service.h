// The router's internal Registry service: one bidirectional stream per worker (registration,
// then load reports and prefix-cache events, fed to the worker registry) and
// GetClusterStatus for `pdctl status`.
// Thread-safety: gRPC calls it from its own threads; state lives in the worker registry.
#ifndef PDSERVE_ROUTER_REGISTRY_SERVICE_H_
#define PDSERVE_ROUTER_REGISTRY_SERVICE_H_

#include <atomic>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "pdserve/v1/registry.grpc.pb.h"
#include "router/address_verifier.h"
#include "router/cost_model.h"
#include "router/counts_by_key.h"
#include "router/decision_log.h"
#include "router/worker_registry.h"

namespace pdserve::router {

struct RegistryServiceOptions {
  // The report interval the router asks workers for. Default 100 ms.
  absl::Duration report_interval = absl::Milliseconds(100);
  // How long a worker with unchanged load may go without reporting (zero: never skip).
  absl::Duration heartbeat_interval = absl::ZeroDuration();
  std::string policy;              // Reported in the cluster status.
  std::function<int()> in_flight;  // Requests being relayed now.
  // The cluster's registration token: a registration without it (kRegistrationTokenHeader)
  // is refused UNAUTHENTICATED and logged with its peer. Empty: anyone may register.
  std::string registration_token;
  // When set, a registration is accepted only once its address answers as the worker it
  // claims, and a live holder of the same id whose address does not is replaced.
  const AddressVerifier* verifier = nullptr;
  // Live registrations one peer address may hold (0: no limit). Default 256.
  int max_workers_per_peer = 256;
  // Non-empty: a worker registers as id X only with a client certificate naming the URI
  // SAN worker_id_uri_prefix + X (worker_certificate.h); others are refused PERMISSION_DENIED.
  std::string worker_id_uri_prefix;
};

class RegistryService final : public v1::Registry::CallbackService {
 public:
  RegistryService(WorkerRegistry* registry, DecisionLog* log, const CostModel* cost_model,
                  RegistryServiceOptions options);

  grpc::ServerBidiReactor<v1::WorkerMessage, v1::RouterMessage>* Connect(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* GetClusterStatus(grpc::CallbackServerContext* context,
                                             const v1::ClusterStatusRequest* request,
                                             v1::ClusterStatus* response) override;
  grpc::ServerUnaryReactor* SwitchRole(grpc::CallbackServerContext* context,
                                       const v1::SwitchRoleRequest* request,
                                       v1::SwitchRoleResponse* response) override;

  // SIGTERM: every worker stream ends at its next message (within a report interval), so
  // that these long-lived calls do not hold the router's drain until its deadline.
  void BeginDrain() { draining_.store(true); }

 private:
  // Whether the call carries the registration token (true when the router has none); a
  // refusal is logged with the peer.
  bool Authorized(grpc::CallbackServerContext* context, const char* what) const;

  std::atomic<bool> draining_{false};
  CountsByKey peers_;  // Live registrations by peer address.
  WorkerRegistry* registry_;
  DecisionLog* log_;
  const CostModel* cost_model_;
  const RegistryServiceOptions options_;
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_REGISTRY_SERVICE_H_
