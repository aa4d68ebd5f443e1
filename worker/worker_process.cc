#include "worker/worker_process.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/perf_profile.h"
#include "common/status_macros.h"
#include "kvtransfer/staging/cuda_block_copier.h"
#include "kvtransfer/staging/memcpy_block_copier.h"
#include "prometheus/gauge.h"
#include "wire/request_bridge.h"

namespace pdserve {

absl::Status WorkerProcessConfig::Validate() const {
  if (role.empty()) return absl::InvalidArgumentError("worker role: required");
  if (model_dir.empty()) return absl::InvalidArgumentError("--model: required");
  RETURN_IF_ERROR(server.Validate());
  RETURN_IF_ERROR(tls.Validate());
  RETURN_IF_ERROR(engine.Validate());
  if (block_size != 0 &&
      (block_size < 1 || block_size > 1024 || (block_size & (block_size - 1)) != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--block_size: ", block_size, " must be 0 (the backend's) or a power of two in [1, 1024]"));
  }
  if (num_blocks < 0)
    return absl::InvalidArgumentError(absl::StrCat("--num_blocks: ", num_blocks, " must be >= 0"));
  if (memory_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory_bytes: ", memory_bytes, " must be >= 0"));
  }
  if (num_blocks == 0 && memory_bytes == 0 && kv_cache_bytes < (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_cache_bytes: ", kv_cache_bytes, " is below 1 MiB"));
  }
  if (kv_transport) RETURN_IF_ERROR(transport.Validate());
  if (kv_staging != "auto" && kv_staging != "always") {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_staging: '", kv_staging, "' is not one of auto, always"));
  }
  if (kv_staging_blocks < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_staging_blocks: ", kv_staging_blocks, " must be >= 0"));
  }
  return absl::OkStatus();
}

namespace {

// The network devices UCX may use. A worker whose peers reach it on loopback keeps UCX's TCP
// listeners on loopback too (UCX otherwise listens on every interface it finds); elsewhere UCX
// keeps every device (RDMA NICs among them) unless --ucx_net_devices narrows it.
absl::StatusOr<std::string> KvNetDevices(const WorkerProcessConfig& config) {
  if (!config.transport.ucx.net_devices.empty()) return config.transport.ucx.net_devices;
  ASSIGN_OR_RETURN(HostPort listen, ParseHostPort(config.server.grpc.listen_address, "--listen"));
  const std::string& host = config.advertise_host.empty() ? listen.host : config.advertise_host;
  if (!IsLoopbackHost(host)) {
    PDS_LOG(INFO) << "UCX may use every network device of this host; --ucx_net_devices "
                     "restricts it (docs/security.md)";
    return std::string();
  }
  return LoopbackInterfaceName();
}

// The pool's geometry: the model's, with the flags' block size and block count, or the
// backend's where it has its own (the emulated backend's profile); a flag that contradicts
// the backend is an error naming it.
absl::StatusOr<KvLayout> PoolLayout(const WorkerProcessConfig& config, const engine::Model& model) {
  const engine::KvPoolHint hint = model.kv_pool_hint();
  int block_size = config.block_size;
  if (hint.block_size > 0) {
    if (block_size != 0 && block_size != hint.block_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--block_size: ", block_size, " does not fit the ", model.backend_name(), " backend's ",
          hint.block_size, " (its profile's cluster.block_size; leave it 0)"));
    }
    block_size = hint.block_size;
  }
  if (block_size == 0) block_size = WorkerProcessConfig::kDefaultBlockSize;
  KvLayout layout = model.MakeKvLayout(1, block_size, config.kv_dtype);
  if (hint.num_blocks > 0) {
    if (config.num_blocks != 0 && config.num_blocks != hint.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--num_blocks: ", config.num_blocks, " does not fit the ", model.backend_name(),
          " backend's pool of ", hint.num_blocks, " blocks (its profile's cluster.kv_blocks)"));
    }
    if (config.memory_bytes != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--memory_bytes: the ", model.backend_name(),
                                                     " backend's pool is its "
                                                     "profile's cluster.kv_blocks (",
                                                     hint.num_blocks, "); leave it 0"));
    }
    layout.num_blocks = hint.num_blocks;
    return layout;
  }
  const int64_t weight_bytes = static_cast<int64_t>(model.memory_bytes());
  const int64_t kv_bytes = config.num_blocks == 0 && config.memory_bytes > 0
                               ? config.memory_bytes - weight_bytes
                               : config.kv_cache_bytes;
  layout.num_blocks = config.num_blocks > 0
                          ? config.num_blocks
                          : kvcache::KvPool::BlocksForBytes(layout, std::max<int64_t>(kv_bytes, 0));
  return layout;
}

// The modelled KV link of an emulated worker: the profile's bandwidth and latency, each real
// byte of `layout` standing for the profile's bytes per token over the pool's.
kvtransfer::LinkEmulation EmulatedLink(const PerfProfile& profile, const KvLayout& layout) {
  const double real_per_token = static_cast<double>(layout.token_bytes()) * 2 * layout.num_layers;
  kvtransfer::LinkEmulation link;
  link.bytes_per_ms = profile.timing.transfer_bytes_per_ms;
  link.latency_ms = profile.timing.transfer_latency_ms;
  link.byte_scale = static_cast<double>(profile.shape.kv_bytes_per_token()) / real_per_token;
  return link;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Create(
    const WorkerProcessConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<WorkerProcess> p(new WorkerProcess());
  p->config_ = config;
  ASSIGN_OR_RETURN(p->security_, GrpcSecurity::FromConfig(config.tls));
  p->config_.server.grpc.security = p->security_;
  p->config_.registry.security = p->security_;
  // The epoch tells the router and peers a restarted process from the one before it.
  p->epoch_ = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  const absl::Time load_start = absl::Now();
  ASSIGN_OR_RETURN(p->model_, engine::LoadModel(config.model_dir, config.engine));
  engine::Model& model = *p->model_.model;
  PDS_LOG(INFO) << "loaded " << p->model_.name << " (" << model.config().architecture << ", "
                << model.weight_bytes() / (1 << 20) << " MiB) on " << model.backend_name() << " ("
                << model.instruction_set() << ") in "
                << absl::FormatDuration(absl::Now() - load_start);

  ASSIGN_OR_RETURN(KvLayout layout, PoolLayout(config, model));
  const int64_t weight_bytes = static_cast<int64_t>(model.memory_bytes());
  const bool sized_by_memory = config.num_blocks == 0 && config.memory_bytes > 0;
  const int64_t kv_bytes =
      sized_by_memory ? config.memory_bytes - weight_bytes : config.kv_cache_bytes;
  if (layout.num_blocks < 2) {
    const int64_t block_bytes = layout.region_bytes() * 2 * layout.num_layers;
    if (sized_by_memory) {
      return absl::InvalidArgumentError(
          absl::StrCat("--memory_bytes: ", config.memory_bytes, " leaves ", kv_bytes,
                       " bytes after the model's ", weight_bytes,
                       " bytes of weights, fewer than 2 KV blocks of ", block_bytes,
                       " bytes (needs at least ", weight_bytes + 2 * block_bytes, ")"));
    }
    if (config.num_blocks > 0) {
      return absl::InvalidArgumentError(absl::StrCat("--num_blocks: ", config.num_blocks,
                                                     " is fewer than 2 KV blocks (of ", block_bytes,
                                                     " bytes)"));
    }
    return absl::InvalidArgumentError(absl::StrCat("--kv_cache_bytes: ", config.kv_cache_bytes,
                                                   " holds fewer than 2 KV blocks of ", block_bytes,
                                                   " bytes"));
  }
  // A device pool cannot be registered with this UCX (no CUDA transports): stage it.
  const bool staged =
      config.kv_transport && (model.kv_pool_on_device() || config.kv_staging == "always");
  if (config.kv_transport) {
    kvtransfer::KvTransportConfig transport = config.transport;
    ASSIGN_OR_RETURN(transport.ucx.net_devices, KvNetDevices(config));
    if (config.engine.backend == "emulated") {
      // The emulated KV is a small stand-in: its transfers take the profile's link time for
      // the bytes the profile's model would move.
      ASSIGN_OR_RETURN(PerfProfile profile, LoadPerfProfile(config.engine.emulated.profile_path));
      transport.link = EmulatedLink(profile, layout);
      transport.ucx.commit_pool = false;  // A stand-in pool, mostly untouched.
      PDS_LOG(INFO) << "KV link emulated: " << profile.timing.transfer_bytes_per_ms / 1e6
                    << " GB/s, " << profile.timing.transfer_latency_ms << " ms latency, each byte "
                    << "standing for " << transport.link.byte_scale;
    }
    ASSIGN_OR_RETURN(p->transport_, kvtransfer::MakeKvTransport(transport));
  }
  if (staged) {
    KvLayout staging = layout;
    staging.num_blocks = config.kv_staging_blocks > 0 ? config.kv_staging_blocks
                                                      : std::max(2, layout.num_blocks / 4);
    ASSIGN_OR_RETURN(p->transport_pool_, p->transport_->CreatePool(staging));
    ASSIGN_OR_RETURN(p->pool_, model.AllocateKvPool(layout));
    const kvtransfer::PoolView pool_view{p->pool_->base(), layout};
    const kvtransfer::PoolView staging_view{p->transport_pool_->base(), staging};
    if (model.kv_pool_on_device()) {
      ASSIGN_OR_RETURN(p->copier_, kvtransfer::MakeCudaBlockCopier(pool_view, staging_view, 0));
    } else {
      p->copier_ = std::make_unique<kvtransfer::MemcpyBlockCopier>(pool_view, staging_view);
    }
    p->staging_pool_ = kvtransfer::StagingPool::Create(staging.num_blocks, "--kv_staging_blocks");
    p->staged_transport_ = std::make_unique<kvtransfer::StagingTransport>(
        p->transport_.get(), p->transport_pool_.get(), p->copier_.get(), p->staging_pool_,
        layout.num_blocks);
    PDS_LOG(INFO) << config.role << " kv staging: " << staging.num_blocks << " blocks ("
                  << staging.pool_bytes() / (1 << 20) << " MiB, UCX-registered)";
  } else if (config.kv_transport) {
    ASSIGN_OR_RETURN(p->transport_pool_, p->transport_->CreatePool(layout));
    ASSIGN_OR_RETURN(p->pool_, kvcache::KvPool::Wrap(layout, p->transport_pool_->base(),
                                                     p->transport_pool_->bytes()));
  } else {
    ASSIGN_OR_RETURN(p->pool_, model.AllocateKvPool(layout));
  }
  PDS_LOG(INFO) << config.role << " kv pool: " << layout.DebugString() << " ("
                << layout.pool_bytes() / (1 << 20) << " MiB, "
                << (p->copier_ ? (model.kv_pool_on_device() ? "device, staged" : "local, staged")
                    : p->transport_             ? "UCX-registered"
                    : model.kv_pool_on_device() ? "device"
                                                : "local")
                << ")";
  p->metrics_registry_ = std::make_shared<prometheus::Registry>();
  p->registered_routers_ = &prometheus::BuildGauge()
                                .Name("pdserve_registered_routers")
                                .Help("Routers this worker is registered with (0: none can use it)")
                                .Register(*p->metrics_registry_)
                                .Add({});
  if (p->staging_pool_ != nullptr) {
    auto& staging = prometheus::BuildGauge()
                        .Name("pdserve_kv_staging_blocks")
                        .Help(
                            "Staging pool blocks (--kv_staging_blocks) by state: in_use (leased "
                            "by transfers, or held until a stopped writer acknowledges) and "
                            "total")
                        .Register(*p->metrics_registry_);
    staging.Add({{"state", "total"}}).Set(p->staging_pool_->num_blocks());
    prometheus::Gauge* in_use = &staging.Add({{"state", "in_use"}});
    p->staging_pool_->SetObserver([in_use](int blocks) { in_use->Set(blocks); });
  }
  // What this process holds, in the bytes actually stored (weights at their run-time type).
  prometheus::BuildGauge()
      .Name("pdserve_model_weight_bytes")
      .Help("Bytes of the model's parameters as the engine stores them (--weight_dtype)")
      .Register(*p->metrics_registry_)
      .Add({})
      .Set(static_cast<double>(weight_bytes));
  prometheus::BuildGauge()
      .Name("pdserve_kv_pool_bytes")
      .Help("Bytes of the KV pool (every block of every layer)")
      .Register(*p->metrics_registry_)
      .Add({})
      .Set(static_cast<double>(layout.pool_bytes()));
  return p;
}

absl::Status WorkerProcess::StartServer(const std::vector<HostedService>& services) {
  ServerRunnerConfig server = config_.server;
  server.build_info["backend"] = model().backend_name();
  server.build_info["instruction_set"] = model().instruction_set();
  std::vector<HostedService> all = services;
  all.push_back({&identity_, v1::WorkerIdentity::service_full_name()});
  ASSIGN_OR_RETURN(server_, ServerRunner::Start(server, all, {}, metrics_registry_, config_.role));
  ASSIGN_OR_RETURN(HostPort bound, ParseHostPort(server_->grpc_address(), "grpc address"));
  if (!config_.advertise_host.empty()) bound.host = config_.advertise_host;
  advertised_address_ = bound.ToString();
  worker_id_ = config_.worker_id.empty() ? absl::StrCat(config_.role, "-", advertised_address_)
                                         : config_.worker_id;
  identity_.Set(worker_id_, epoch_);
  return absl::OkStatus();
}

WorkerRegistration WorkerProcess::BaseRegistration(WorkerRole role) const {
  WorkerRegistration r;
  r.worker_id = worker_id_;
  r.role = role;
  r.grpc_address = advertised_address_;
  r.metrics_address = server_->metrics_address();
  r.model = model_.name;
  r.model_fingerprint = model_.model->fingerprint();
  r.kv_layout = pool_->layout();
  r.epoch = epoch_;
  const ModelConfig& config = model_.model->config();
  r.max_context_tokens = config.max_position_embeddings;
  r.vocab_size = config.vocab_size;
  r.architecture = config.architecture;
  return r;
}

void WorkerProcess::Serve(ShutdownSignal& shutdown, const WorkerRegistration& registration,
                          RegistryClient::ReportFn report,
                          const std::function<void()>& begin_drain) {
  {
    absl::MutexLock lock(&registry_mu_);
    registry_config_ = config_.registry;
    if (!registry_config_.router_address.empty()) {
      // Ready (pdserve.ready) only while registered with a router: a worker no router knows
      // serves nothing, and a rollout should not count it as up.
      server_->SetReady(false);
      registry_config_.on_registered_routers = [this](int routers) {
        registered_routers_->Set(routers);
        server_->SetReady(routers > 0);
      };
    }
    if (on_role_switch_) {
      registry_config_.on_role_switch = [this](const v1::RoleSwitch& order,
                                               const std::string& router) {
        PDS_LOG(INFO) << "router " << router << " asks " << worker_id_ << " to become a "
                      << (order.role() == v1::WORKER_ROLE_DECODE ? "decode" : "prefill")
                      << " worker: " << order.reason();
        on_role_switch_(order);
      };
    }
    registry_client_ =
        std::make_unique<RegistryClient>(registry_config_, registration, std::move(report));
    registry_client_->Start();
  }
  server_->SetServing(true);
  PDS_LOG(INFO) << config_.role << " worker " << worker_id_ << " serving at "
                << advertised_address_;
  server_->RunUntilShutdown(shutdown, [&begin_drain](absl::Time) { begin_drain(); });
  absl::MutexLock lock(&registry_mu_);
  registry_stopped_ = true;
  registry_client_->Stop();
}

bool WorkerProcess::Reregister(const WorkerRegistration& registration,
                               RegistryClient::ReportFn report) {
  absl::MutexLock lock(&registry_mu_);
  if (registry_stopped_ || registry_client_ == nullptr) return false;
  registry_client_->Stop();  // Its streams close: the routers forget the old registration.
  registry_client_ =
      std::make_unique<RegistryClient>(registry_config_, registration, std::move(report));
  registry_client_->Start();
  return true;
}

void WorkerProcess::StopServing() {
  {
    absl::MutexLock lock(&registry_mu_);
    registry_stopped_ = true;
    if (registry_client_) registry_client_->Stop();
  }
  server_.reset();
}

WorkerProcess::~WorkerProcess() {
  StopServing();
  // Leases may outlive the process object's metrics (held by a role torn down later).
  if (staging_pool_ != nullptr) staging_pool_->SetObserver(nullptr);
  staged_transport_.reset();  // Lands through the copier into the pool, over transport_.
  copier_.reset();            // Copies between the pool and the staging memory: before both.
  pool_.reset();              // Views the transport's memory: before it.
  transport_pool_.reset();
  transport_.reset();
}

}  // namespace pdserve
