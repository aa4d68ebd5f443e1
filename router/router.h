// A router process, assembled: model catalog (tokenizers), worker registry with its prefix
// index, cost model, placement policy, the public Generation service, the internal Registry
// service, the OpenAI-compatible HTTP front (optional), /metrics and health, and the sweeper
// that forgets silent workers. main.cc parses
// flags into RouterConfig and calls Create + Run.
// Thread-safety: Create/Run/destruction from the main thread.
#ifndef PDSERVE_ROUTER_ROUTER_H_
#define PDSERVE_ROUTER_ROUTER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "router/cost_model.h"
#include "router/decision_log.h"
#include "router/generation_service.h"
#include "router/model_catalog.h"
#include "router/openai/openai_front.h"
#include "router/placement/placement_policy.h"
#include "router/placer.h"
#include "router/rebalance_planner.h"
#include "router/registry_service.h"
#include "router/router_metrics.h"
#include "router/slo_catalog.h"
#include "router/worker_registry.h"
#include "server/server_runner.h"

namespace pdserve::router {

struct RouterConfig {
  // Model directories (config.json + tokenizer.json; weights are not read). Required.
  std::vector<std::string> model_dirs;
  // The public Generation service listens on server.grpc; the Registry service on
  // server.internal_grpc when it has an address (--registry_listen), else beside Generation.
  ServerRunnerConfig server;
  // Workers must send this token to register (--registration_token_file); empty: anyone who
  // reaches the registry may (docs/security.md).
  std::string registration_token;
  // TLS for every gRPC link of the router (both listeners and its calls to decode workers);
  // the registry listener then demands client certificates. Overrides the security fields of
  // `server` and `generation`.
  TlsConfig tls;
  // A worker silent this long is removed and its requests end with UNAVAILABLE. Default 2 s.
  absl::Duration report_timeout = absl::Seconds(2);
  // cost_model.json; empty uses the built-in defaults (CostModelParams).
  std::string cost_model_path;
  PolicyConfig policy;
  // Named objectives requests may ask for (SloCatalog::Parse: NAME:TTFT:TPOT,...); a request's
  // unset objectives default to policy.slo.
  std::string slo_classes;
  PlacerConfig placer;
  GenerationServiceOptions generation;
  // Registrations are accepted only once their address answers as the worker (within
  // verify_timeout), and an unanswering holder of an id is replaced (address_verifier.h).
  // Default on.
  bool verify_worker_addresses = true;
  absl::Duration verify_timeout = absl::Seconds(1);
  // Live registrations one peer address may hold (0: no limit). Default 256.
  int max_workers_per_peer = 256;
  // Non-empty (needs `tls`): a worker's id must be named by its client certificate, as the
  // URI SAN worker_id_uri_prefix + id (worker_certificate.h).
  std::string worker_id_uri_prefix;
  // Clients whose requests in flight /metrics shows (the busiest). Default 8.
  int client_metrics_top = 8;
  // Placement decisions kept for `pdctl status`. Default 1000.
  int decision_log_size = 1000;
  // Role changes the router decides itself (--rebalance=on): the planner looks every
  // rebalance.interval and orders a switch of a role-switching worker when one pays
  // (rebalance_planner.h). Off by default: switches come from `pdctl switch-role`.
  bool rebalance = false;
  RebalanceConfig rebalance_config;
  // The OpenAI-compatible HTTP front; off when http.http.listen_address is empty (default).
  openai::OpenAiFrontConfig http{.http = {.listen_address = ""}};

  absl::Status Validate() const;
};

class Router {
 public:
  static absl::StatusOr<std::unique_ptr<Router>> Create(const RouterConfig& config);
  ~Router();
  void Run(ShutdownSignal& shutdown);
  const std::string& grpc_address() const { return server_->grpc_address(); }
  // Where workers register (the registry listener, or the main one).
  const std::string& registry_address() const { return server_->internal_grpc_address(); }
  // The HTTP front's address; empty when it is off.
  std::string http_address() const { return http_front_ ? http_front_->address() : ""; }

 private:
  Router() = default;
  void Sweep();
  // The busiest clients' gauges: those no longer among them are removed.
  void PublishClients(std::vector<std::string>* shown);
  // Every rebalance interval: each model's planner looks, and orders what pays.
  void Rebalance();
  void StopHttpFront();
  // Waits until no request runs (HTTP or gRPC), or `deadline`; true if none does.
  bool WaitRequestsIdle(absl::Time deadline) const;

  RouterConfig config_;
  std::unique_ptr<ModelCatalog> catalog_;
  std::shared_ptr<prometheus::Registry> prometheus_;
  std::unique_ptr<RouterMetrics> metrics_;
  std::unique_ptr<CostModel> cost_model_;
  std::unique_ptr<PlacementPolicy> policy_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<DecisionLog> decisions_;
  std::unique_ptr<Placer> placer_;
  std::unique_ptr<GenerationService> generation_;
  std::unique_ptr<AddressVerifier> verifier_;  // With verify_worker_addresses.
  std::unique_ptr<RegistryService> registry_service_;
  std::unique_ptr<ServerRunner> server_;
  // Uses server_'s in-process channel; stopped once server_ has drained.
  std::unique_ptr<openai::OpenAiFront> http_front_;
  absl::Notification stop_sweeper_;
  std::thread sweeper_;
  std::thread rebalancer_;  // With --rebalance=on; stops with the sweeper.
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_ROUTER_H_
