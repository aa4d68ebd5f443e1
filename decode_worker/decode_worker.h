// A decode worker process, assembled: model, KV pool (UCX-registered when the transport is
// enabled), engine loop, gRPC service, /metrics, health, registry client. main.cc only parses
// flags into DecodeWorkerConfig and calls Create + Run.
// Thread-safety: Create/Run/destruction from the main thread.
#ifndef PDSERVE_DECODE_WORKER_DECODE_WORKER_H_
#define PDSERVE_DECODE_WORKER_DECODE_WORKER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/shutdown_signal.h"
#include "common/worker_process.h"
#include "decode_worker/decode_metrics.h"
#include "decode_worker/decode_service.h"
#include "decode_worker/decode_worker_config.h"
#include "decode_worker/engine_loop.h"
#include "decode_worker/grpc_prefill_client.h"
#include "decode_worker/offload_coordinator.h"

namespace pdserve::decode {

class DecodeWorker {
 public:
  static absl::StatusOr<std::unique_ptr<DecodeWorker>> Create(const DecodeWorkerConfig& config);
  ~DecodeWorker();

  // Serves until SIGTERM/SIGINT, then drains: health NOT_SERVING, no new requests, running
  // ones finish within the drain timeout.
  void Run(ShutdownSignal& shutdown);

  const std::string& worker_id() const { return process_->worker_id(); }
  const std::string& grpc_address() const { return process_->grpc_address(); }
  EngineLoop* loop() { return loop_.get(); }

 private:
  DecodeWorker() = default;
  v1::WorkerRegistration Registration() const;
  void FillReport(bool reconnected, v1::LoadReport* load, v1::PrefixCacheEvents* events);

  DecodeWorkerConfig config_;
  std::unique_ptr<WorkerProcess> process_;  // Model, KV pool, transport, servers.
  std::unique_ptr<DecodeMetrics> metrics_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<GrpcPrefillClient>
      prefill_client_;                           // Outlives offload_. Null without a KV transport.
  std::unique_ptr<OffloadCoordinator> offload_;  // Null without a KV transport.
  std::unique_ptr<DecodeService> service_;
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_DECODE_WORKER_H_
