// A prefill worker process, assembled: model, its own KV pool (registered with UCX: the
// source of every transfer), batcher, gRPC Prefill service, /metrics, health, registry
// client. main.cc parses flags into PrefillWorkerConfig and calls Create + Run.
// Thread-safety: Create/Run/destruction from the main thread.
#ifndef PDSERVE_PREFILL_WORKER_PREFILL_WORKER_H_
#define PDSERVE_PREFILL_WORKER_PREFILL_WORKER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/registry_client.h"
#include "common/server_runner.h"
#include "engine/model_loader.h"
#include "kvtransfer/factory.h"
#include "prefill_worker/prefill_batcher.h"
#include "prefill_worker/prefill_service.h"

namespace pdserve::prefill {

struct PrefillWorkerConfig {
  // Model directory. Required.
  std::string model_dir;
  // Stable id reported to the router. Default: "prefill-" + the bound address.
  std::string worker_id;
  std::string advertise_host;
  ServerRunnerConfig server;
  RegistryClientConfig registry;
  engine::EngineOptions engine;
  PrefillBatcherConfig batcher;
  kvtransfer::KvTransportConfig transport;
  // KV layout of the pool (must match the decode workers'): block size and dtype.
  int block_size = 16;
  DType kv_dtype = DType::kF32;
  // Pool bytes (holds one batch). Default 512 MiB.
  int64_t kv_cache_bytes = int64_t{512} << 20;

  absl::Status Validate() const;
};

class PrefillWorker {
 public:
  static absl::StatusOr<std::unique_ptr<PrefillWorker>> Create(const PrefillWorkerConfig& config);
  ~PrefillWorker();
  void Run(ShutdownSignal& shutdown);

 private:
  PrefillWorker() = default;
  v1::WorkerRegistration Registration() const;

  PrefillWorkerConfig config_;
  std::string worker_id_;
  std::string advertised_address_;
  uint64_t epoch_ = 0;
  engine::LoadedModel model_;
  std::unique_ptr<kvtransfer::KvTransport> transport_;
  std::unique_ptr<kvtransfer::LocalPool> transport_pool_;
  std::unique_ptr<engine::KvPool> pool_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<PrefillMetrics> metrics_;
  std::unique_ptr<PrefillBatcher> batcher_;
  std::unique_ptr<PrefillService> service_;
  std::unique_ptr<ServerRunner> server_;
  std::unique_ptr<RegistryClient> registry_client_;
};

}  // namespace pdserve::prefill

#endif  // PDSERVE_PREFILL_WORKER_PREFILL_WORKER_H_
