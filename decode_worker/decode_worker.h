// A decode worker process, assembled: model, KV pool (UCX-registered when the transport is
// enabled), engine loop, gRPC service, /metrics, health, registry client. main.cc only parses
// flags into DecodeWorkerConfig and calls Create + Run.
// Thread-safety: Create/Run/destruction from the main thread.
#ifndef PDSERVE_DECODE_WORKER_DECODE_WORKER_H_
#define PDSERVE_DECODE_WORKER_DECODE_WORKER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/registry_client.h"
#include "common/server_runner.h"
#include "decode_worker/decode_metrics.h"
#include "decode_worker/decode_service.h"
#include "decode_worker/decode_worker_config.h"
#include "decode_worker/engine_loop.h"
#include "decode_worker/offload_coordinator.h"
#include "engine/model_loader.h"
#include "kvtransfer/kv_transport.h"

namespace pdserve::decode {

class DecodeWorker {
 public:
  static absl::StatusOr<std::unique_ptr<DecodeWorker>> Create(const DecodeWorkerConfig& config);
  ~DecodeWorker();

  // Serves until SIGTERM/SIGINT, then drains: health NOT_SERVING, no new requests, running
  // ones finish within the drain timeout.
  void Run(ShutdownSignal& shutdown);

  const std::string& worker_id() const { return worker_id_; }
  const std::string& grpc_address() const { return server_->grpc_address(); }
  EngineLoop* loop() { return loop_.get(); }

 private:
  DecodeWorker() = default;
  v1::WorkerRegistration Registration() const;

  DecodeWorkerConfig config_;
  std::string worker_id_;
  std::string advertised_address_;
  uint64_t epoch_ = 0;
  engine::LoadedModel model_;
  std::unique_ptr<kvtransfer::KvTransport> transport_;
  std::unique_ptr<kvtransfer::LocalPool> transport_pool_;
  std::unique_ptr<engine::KvPool> pool_;
  kvtransfer::KvPoolDescriptor descriptor_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<DecodeMetrics> metrics_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<OffloadCoordinator> offload_;  // Null without a KV transport.
  std::unique_ptr<DecodeService> service_;
  std::unique_ptr<ServerRunner> server_;
  std::unique_ptr<RegistryClient> registry_client_;
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_DECODE_WORKER_H_
