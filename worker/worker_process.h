// What a pdserve worker process is, whatever its role: identity (worker id, epoch, the address
// it advertises), its model, its KV pool (registered with the KV transport when it has one),
// the gRPC + /metrics servers, and the registry client that keeps it known to the router.
// The decode and prefill workers assemble their role's parts (engine loop or batcher, service)
// around one of these; the order of the steps below is the same for both:
//   Create (model, pool) -> the role builds its service -> StartServer (address, id)
//   -> Serve (register, SERVING, wait for SIGTERM, drain) -> StopServing -> role teardown.
// Thread-safety: all calls from the main thread; the accessors' objects have their own rules.
#ifndef PDSERVE_WORKER_WORKER_PROCESS_H_
#define PDSERVE_WORKER_WORKER_PROCESS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/kv_layout.h"
#include "engine/model_loader.h"
#include "kvcache/kv_pool.h"
#include "kvtransfer/factory.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/staging/block_copier.h"
#include "kvtransfer/staging/staging_pool.h"
#include "kvtransfer/staging/staging_transport.h"
#include "prometheus/gauge.h"
#include "server/registry_client.h"
#include "server/server_runner.h"
#include "server/worker_identity_service.h"

namespace pdserve {

struct WorkerProcessConfig {
  // "decode" or "prefill": the default worker id's prefix and the metrics' component.
  std::string role;
  // Model directory (config.json, safetensors, tokenizer.json). Required.
  std::string model_dir;
  // Stable id reported to the router. Default: role + "-" + the advertised address.
  std::string worker_id;
  // Host that peers and the router use to reach this worker; empty: the listen host.
  std::string advertise_host;
  ServerRunnerConfig server;
  RegistryClientConfig registry;
  // TLS for every gRPC link of the worker (its listener, the registry stream, and the decode
  // worker's calls to prefill workers); plaintext when not enabled. Overrides the security
  // fields of `server` and `registry`.
  TlsConfig tls;
  engine::EngineOptions engine;
  // KV layout of the pool: tokens per block (a power of two; 0: the backend's, kDefaultBlockSize
  // unless it says otherwise) and the element type.
  static constexpr int kDefaultBlockSize = 16;
  int block_size = 0;
  DType kv_dtype = DType::kF32;
  // Pool size: num_blocks if > 0, else as many blocks as kv_cache_bytes holds (default 512 MiB).
  int num_blocks = 0;
  int64_t kv_cache_bytes = int64_t{512} << 20;
  // When > 0 (and num_blocks is 0): the bytes for the model's weights and the KV pool
  // together; the pool gets what the weights, as stored (engine.weight_dtype), leave. So a
  // bf16 checkpoint kept in bf16 leaves room for more KV than the same one widened to f32.
  int64_t memory_bytes = 0;
  // With a transport the pool is allocated and registered by it (peers write into it, or it
  // is the source of their transfers); without, it is plain memory.
  bool kv_transport = true;
  kvtransfer::KvTransportConfig transport;
  // How KV reaches the transport: "auto" registers the pool itself, or stages through a
  // registered host pool when the pool is in device memory (a transport without CUDA
  // support); "always" stages a host pool too (the staged path without a GPU).
  std::string kv_staging = "auto";
  // Staging pool blocks, in addition to the pool; 0: a quarter of the pool's blocks (at least
  // 2). A transfer needs as many staging blocks as it writes.
  int kv_staging_blocks = 0;

  absl::Status Validate() const;
};

class WorkerProcess {
 public:
  // Loads the model and builds the KV pool.
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Create(const WorkerProcessConfig& config);
  ~WorkerProcess();

  // Starts gRPC (health NOT_SERVING) and /metrics, then fixes the advertised address and the
  // worker id. The services must outlive StopServing().
  absl::Status StartServer(const std::vector<HostedService>& services);

  // A registration carrying what every worker reports (id, addresses, model, KV layout,
  // epoch); the role adds its limits.
  WorkerRegistration BaseRegistration(WorkerRole role) const;

  // Registers with the router (when one is configured), goes SERVING and blocks until
  // `shutdown` fires; then calls `begin_drain` (stop admitting new work), drains the gRPC
  // server within the drain timeout and leaves the registry.
  void Serve(ShutdownSignal& shutdown, const WorkerRegistration& registration,
             RegistryClient::ReportFn report, const std::function<void()>& begin_drain);

  // While Serve runs (from another thread; not from a registry callback): leaves every
  // router and registers again with `registration` and `report` (a role change). Returns
  // false once Serve has stopped registering.
  bool Reregister(const WorkerRegistration& registration, RegistryClient::ReportFn report);
  // Called when a router orders a role change (see RegistryClientConfig::on_role_switch).
  // Set before Serve.
  void SetRoleSwitchHandler(std::function<void(const v1::RoleSwitch& order)> handler) {
    on_role_switch_ = std::move(handler);
  }

  // Stops the registry client and the servers: after this no call reaches the services, so
  // the role may tear down what they use. Idempotent; the destructor calls it too.
  void StopServing();

  const WorkerProcessConfig& config() const { return config_; }
  // How this worker's gRPC links are secured (for the clients a role adds).
  const GrpcSecurity& security() const { return security_; }
  engine::Model& model() { return *model_.model; }
  const engine::LoadedModel& loaded_model() const { return model_; }
  kvcache::KvPool& pool() { return *pool_; }
  // Null when the process runs without a KV transport. With staging, the staging transport
  // over the UCX one: callers name blocks of pool() either way.
  kvtransfer::KvTransport* transport() {
    return staged_transport_ ? staged_transport_.get() : transport_.get();
  }
  // The memory transport() registered: with staging, the staging memory; else the pool's own.
  kvtransfer::LocalPool* transport_pool() { return transport_pool_.get(); }
  uint64_t epoch() const { return epoch_; }
  const std::string& worker_id() const { return worker_id_; }
  const std::string& advertised_address() const { return advertised_address_; }
  const std::string& grpc_address() const { return server_->grpc_address(); }
  const std::shared_ptr<prometheus::Registry>& metrics_registry() const {
    return metrics_registry_;
  }

 private:
  WorkerProcess() = default;

  WorkerProcessConfig config_;
  GrpcSecurity security_;
  uint64_t epoch_ = 0;
  std::string worker_id_;
  std::string advertised_address_;
  engine::LoadedModel model_;
  std::unique_ptr<kvtransfer::KvTransport> transport_;
  std::unique_ptr<kvtransfer::LocalPool> transport_pool_;
  std::unique_ptr<kvcache::KvPool> pool_;
  std::unique_ptr<kvtransfer::BlockCopier> copier_;  // Staged: pool <-> transport_pool_.
  std::shared_ptr<kvtransfer::StagingPool> staging_pool_;
  std::unique_ptr<kvtransfer::StagingTransport> staged_transport_;  // Over transport_.
  std::shared_ptr<prometheus::Registry> metrics_registry_;
  prometheus::Gauge* registered_routers_ = nullptr;  // In metrics_registry_.
  // Answers the router's "who is at this address" (before server_: outlives it).
  WorkerIdentityService identity_;
  std::unique_ptr<ServerRunner> server_;
  std::function<void(const v1::RoleSwitch& order)> on_role_switch_;
  absl::Mutex registry_mu_;  // Serve and Reregister.
  RegistryClientConfig registry_config_ ABSL_GUARDED_BY(registry_mu_);
  bool registry_stopped_ ABSL_GUARDED_BY(registry_mu_) = false;
  std::unique_ptr<RegistryClient> registry_client_ ABSL_GUARDED_BY(registry_mu_);
};

}  // namespace pdserve

#endif  // PDSERVE_WORKER_WORKER_PROCESS_H_
