// A decode worker process, assembled: a worker process (model, KV pool registered with UCX when
// the transport is enabled, servers, registry client) with the decode role (engine loop, gRPC
// service, offload path). main.cc only parses flags into DecodeWorkerConfig and calls
// Create + Run.
// Thread-safety: Create/Run/destruction from the main thread.
#ifndef PDSERVE_DECODE_WORKER_DECODE_WORKER_H_
#define PDSERVE_DECODE_WORKER_DECODE_WORKER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/shutdown_signal.h"
#include "decode_worker/decode_role.h"
#include "decode_worker/decode_worker_config.h"
#include "worker/worker_process.h"

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
  EngineLoop* loop() { return role_->loop(); }

 private:
  DecodeWorker() = default;

  std::unique_ptr<WorkerProcess> process_;  // Model, KV pool, transport, servers.
  std::unique_ptr<DecodeRole> role_;
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_DECODE_WORKER_H_
