#include "router/router.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pdserve::router {
namespace {

// After the drain deadline, how long interrupted requests may take to write their endings.
constexpr absl::Duration kInterruptedWindDown = absl::Seconds(2);

}  // namespace

absl::Status RouterConfig::Validate() const {
  if (model_dirs.empty())
    return absl::InvalidArgumentError("--model: at least one model directory is required");
  RETURN_IF_ERROR(server.Validate());
  RETURN_IF_ERROR(tls.Validate());
  if (report_timeout < absl::Milliseconds(200)) {
    return absl::InvalidArgumentError(
        "--worker_timeout: must be >= 200ms (workers report every 100 ms)");
  }
  RETURN_IF_ERROR(policy.Validate());
  RETURN_IF_ERROR(SloCatalog::Parse(slo_classes, policy.slo).status());
  RETURN_IF_ERROR(rebalance_config.Validate());
  if (placer.max_waiting_per_worker < 1)
    return absl::InvalidArgumentError("--max_waiting_per_worker: must be >= 1");
  if (placer.balance_abs < 0) return absl::InvalidArgumentError("--balance_abs: must be >= 0");
  if (!(placer.balance_rel >= 1)) return absl::InvalidArgumentError("--balance_rel: must be >= 1");
  if (generation.max_in_flight < 1)
    return absl::InvalidArgumentError("--max_in_flight: must be >= 1");
  if (generation.tokenizer_threads < 1 || generation.tokenizer_threads > 256) {
    return absl::InvalidArgumentError("--tokenizer_threads: must be in [1, 256]");
  }
  if (generation.max_tokenize_queue < 1)
    return absl::InvalidArgumentError("--max_tokenize_queue: must be >= 1");
  if (generation.max_prompt_bytes < 0)
    return absl::InvalidArgumentError("--max_prompt_bytes: must be >= 0");
  RETURN_IF_ERROR(generation.clients.Validate());
  if (const std::string& h = generation.client_identity.header;
      !h.empty() &&
      (h != absl::AsciiStrToLower(h) || h.find_first_of(" :\r\n") != std::string::npos)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--client_id_header: '", h, "' is not a lower-case header name"));
  }
  if (verify_timeout < absl::Milliseconds(10) || verify_timeout > absl::Seconds(60))
    return absl::InvalidArgumentError("--worker_verify_timeout: must be in [10ms, 60s]");
  if (max_workers_per_peer < 0)
    return absl::InvalidArgumentError("--max_workers_per_peer: must be >= 0 (0: no limit)");
  if (!worker_id_uri_prefix.empty() && !tls.enabled()) {
    return absl::InvalidArgumentError(
        "--worker_id_uri_prefix: needs TLS (--tls_cert, --tls_key, --tls_ca): the id is proved "
        "by the worker's client certificate");
  }
  if (client_metrics_top < 0 || client_metrics_top > 100)
    return absl::InvalidArgumentError("--client_metrics_top: must be in [0, 100]");
  if (decision_log_size < 1) return absl::InvalidArgumentError("--decision_log_size: must be >= 1");
  if (!http.http.listen_address.empty()) RETURN_IF_ERROR(http.Validate());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Router>> Router::Create(const RouterConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<Router> r(new Router());
  r->config_ = config;
  ASSIGN_OR_RETURN(const GrpcSecurity security, GrpcSecurity::FromConfig(config.tls));
  ServerRunnerConfig server = config.server;
  server.grpc.security = security;
  server.internal_grpc.security = security;
  // Only workers with a certificate the CA signed may register (when TLS is on).
  server.internal_grpc.always_require_client_cert = true;
  GenerationServiceOptions generation_options = config.generation;
  generation_options.security = security;
  generation_options.clients.retry_after = config.generation.retry_after;
  generation_options.waiting_slots_per_worker = config.placer.max_waiting_per_worker;
  // Calls from the HTTP front name their HTTP client; only the front knows this.
  generation_options.client_identity.front_secret = RandomFrontSecret();
  ASSIGN_OR_RETURN(generation_options.slos,
                   SloCatalog::Parse(config.slo_classes, config.policy.slo));
  ASSIGN_OR_RETURN(r->catalog_, ModelCatalog::Load(config.model_dirs));
  CostModelParams params;
  if (!config.cost_model_path.empty()) {
    ASSIGN_OR_RETURN(params, LoadCostModel(config.cost_model_path));
  }
  r->cost_model_ = std::make_unique<CostModel>(params);
  ASSIGN_OR_RETURN(r->policy_, MakePlacementPolicy(config.policy));
  r->prometheus_ = std::make_shared<prometheus::Registry>();
  r->metrics_ = std::make_unique<RouterMetrics>(*r->prometheus_);
  r->registry_ = std::make_unique<WorkerRegistry>(Clock::Real(), config.report_timeout,
                                                  r->cost_model_.get(), r->metrics_.get());
  r->decisions_ = std::make_unique<DecisionLog>(static_cast<size_t>(config.decision_log_size));
  PlacerConfig placer = config.placer;
  placer.retry_after = config.generation.retry_after;
  r->placer_ = std::make_unique<Placer>(r->registry_.get(), r->cost_model_.get(), r->policy_.get(),
                                        placer, r->metrics_.get(), r->decisions_.get());
  r->generation_ = std::make_unique<GenerationService>(r->catalog_.get(), r->placer_.get(),
                                                       r->registry_.get(), r->cost_model_.get(),
                                                       r->metrics_.get(), generation_options);
  RegistryServiceOptions registry_options;
  // Four chances within the worker timeout for an idle worker's report to arrive.
  registry_options.heartbeat_interval =
      std::max(registry_options.report_interval, config.report_timeout / 4);
  registry_options.policy = r->policy_->name();
  registry_options.registration_token = config.registration_token;
  registry_options.max_workers_per_peer = config.max_workers_per_peer;
  registry_options.worker_id_uri_prefix = config.worker_id_uri_prefix;
  if (config.verify_worker_addresses) {
    r->verifier_ = std::make_unique<AddressVerifier>(security, config.verify_timeout);
    registry_options.verifier = r->verifier_.get();
  }
  GenerationService* generation = r->generation_.get();
  registry_options.in_flight = [generation] { return generation->in_flight(); };
  r->registry_service_ = std::make_unique<RegistryService>(r->registry_.get(), r->decisions_.get(),
                                                           r->cost_model_.get(), registry_options);
  if (!config.http.http.listen_address.empty()) {
    // The HTTP front calls the Generation service in process: same admission, placement,
    // deadlines, cancellation and metrics as gRPC clients.
    Router* self = r.get();
    server.start_more_listeners =
        [self, config, identity = generation_options.client_identity](
            std::shared_ptr<grpc::Channel> channel) -> absl::StatusOr<ServingInfo> {
      WorkerRegistry* registry = self->registry_.get();
      openai::OpenAiFrontConfig http = config.http;
      http.client_identity = identity;
      ASSIGN_OR_RETURN(
          self->http_front_,
          openai::OpenAiFront::Start(
              http, std::move(channel), [registry] { return registry->ReadyDecodeWorkers() > 0; },
              self->metrics_.get()));
      return ServingInfo{{"http", self->http_front_->address()}};
    };
  }
  ASSIGN_OR_RETURN(
      r->server_,
      ServerRunner::Start(server, {{r->generation_.get(), v1::Generation::service_full_name()}},
                          {{r->registry_service_.get(), v1::Registry::service_full_name()}},
                          r->prometheus_, "router"));
  std::string models;
  for (const auto& m : r->catalog_->models()) models += (models.empty() ? "" : ", ") + m->name;
  PDS_LOG(INFO) << "router at " << r->server_->grpc_address() << " (registry at "
                << r->registry_address() << ") serving " << models << ", policy "
                << r->policy_->name();
  return r;
}

void Router::Sweep() {
  const absl::Duration period = std::max(absl::Milliseconds(50), config_.report_timeout / 4);
  std::vector<std::string> shown_clients;
  while (!stop_sweeper_.WaitForNotificationWithTimeout(period)) {
    registry_->ExpireSilent(period);
    PublishClients(&shown_clients);
  }
}

void Router::PublishClients(std::vector<std::string>* shown) {
  const ClientAdmission& clients = generation_->clients();
  metrics_->clients_active.Set(clients.ActiveClients());
  std::vector<std::string> now;
  for (const auto& [client, requests] : clients.Busiest(config_.client_metrics_top)) {
    metrics_->busiest_clients_family.Add({{"client", client}}).Set(requests);
    now.push_back(client);
  }
  for (const std::string& client : *shown) {
    if (std::find(now.begin(), now.end(), client) == now.end())
      metrics_->busiest_clients_family.Remove(
          &metrics_->busiest_clients_family.Add({{"client", client}}));
  }
  *shown = std::move(now);
}

void Router::Rebalance() {
  absl::flat_hash_map<std::string, RebalancePlanner> planners;  // By model.
  while (!stop_sweeper_.WaitForNotificationWithTimeout(config_.rebalance_config.interval)) {
    for (const auto& model : catalog_->models()) {
      PlannerSnapshot snapshot;
      registry_->WithLock([&](std::vector<WorkerEntry*>& workers, const PrefixIndex&) {
        snapshot = SnapshotForPlanner(workers, model->name, *cost_model_, config_.policy.slo,
                                      registry_->clock()->Now());
      });
      RebalancePlanner& planner =
          planners.try_emplace(model->name, config_.rebalance_config).first->second;
      const absl::Time now = absl::Now();
      bool ordered = false;
      for (const RebalanceOrder& order : planner.Look(snapshot, now)) {
        // Refused (a switch the other way, a worker gone meanwhile): logged and counted there.
        ordered |= registry_->RequestSwitch(order.worker_id, order.to, order.reason).ok();
      }
      if (ordered) planner.Ordered(now);
    }
  }
}

void Router::Run(ShutdownSignal& shutdown) {
  // Ready (pdserve.ready) while some decode worker can take requests: a Service then sends
  // clients only to routers that can serve them. It follows the registry at once: a probe
  // right after the workers registered (`pdctl up`, then `pdctl health`) finds it ready.
  registry_->ObserveReadyDecodeWorkers(
      [server = server_.get()](int ready) { server->SetReady(ready > 0); });
  sweeper_ = std::thread([this] { Sweep(); });
  if (config_.rebalance) rebalancer_ = std::thread([this] { Rebalance(); });
  server_->SetServing(true);
  server_->RunUntilShutdown(shutdown, [this](absl::Time deadline) {
    // New requests are refused; those in flight run on until the deadline.
    generation_->BeginDrain();
    // HTTP requests ride in-process gRPC calls, which the server's shutdown would end at once:
    // they finish first.
    if (http_front_) http_front_->StopAccepting();
    if (!WaitRequestsIdle(deadline)) {
      // The orchestrator kills the process soon after the deadline (the chart's grace period
      // is the drain timeout plus 15 s), so what still runs must end now, and cleanly: each
      // request ends UNAVAILABLE saying why (an SSE client gets an error event), which a
      // client can retry elsewhere; its decode worker is told to stop and frees its KV.
      const int interrupted = registry_->InterruptAll(
          absl::StrCat("the router is shutting down and its drain timeout (",
                       absl::FormatDuration(config_.server.drain_timeout),
                       ") passed before this request finished: send it to another router"));
      PDS_LOG(WARNING) << interrupted << " requests still running at the drain deadline; "
                       << "interrupted";
      if (!WaitRequestsIdle(absl::Now() + kInterruptedWindDown)) {
        PDS_LOG(WARNING) << generation_->in_flight() << " requests ("
                         << (http_front_ ? http_front_->active_requests() : 0)
                         << " over HTTP) still running after their interruption";
      }
    }
    // Workers stay registered while relayed calls finish (a worker that leaves the registry
    // has its calls ended); then their streams are closed so that they do not hold the drain.
    registry_service_->BeginDrain();
  });
  stop_sweeper_.Notify();
  sweeper_.join();
  if (rebalancer_.joinable()) rebalancer_.join();
  StopHttpFront();
}

bool Router::WaitRequestsIdle(absl::Time deadline) const {
  if (http_front_ && !http_front_->WaitIdle(deadline)) return false;
  return generation_->WaitIdle(deadline);
}

void Router::StopHttpFront() {
  if (!http_front_) return;
  // After the gRPC drain every in-process call has ended (or ends at once), so this waits
  // for their last writes only.
  if (!http_front_->Stop(absl::Seconds(10))) {
    // Calls still reference the front: leaving it (at exit) is safer than freeing it.
    (void)http_front_.release();
  }
  http_front_.reset();
}

Router::~Router() {
  if (!stop_sweeper_.HasBeenNotified()) stop_sweeper_.Notify();
  if (sweeper_.joinable()) sweeper_.join();
  if (rebalancer_.joinable()) rebalancer_.join();
  if (http_front_) http_front_->StopAccepting();
  // Streams that close from here on change the registry's counts: the server must not be told.
  if (registry_) registry_->ObserveReadyDecodeWorkers(nullptr);
  server_.reset();
  StopHttpFront();
}

}  // namespace pdserve::router
