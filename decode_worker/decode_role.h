// The decode role's parts, built over a worker process (its model, pool, transport and
// servers): metrics, the engine loop, the Decode service and, with a KV transport, the offload
// path (the pool served to prefill workers, the coordinator that awaits their KV). A decode
// worker is a process with this role; a role-switching worker holds it beside the prefill
// role and turns it on and off.
// Order: Create (before the server starts: service() is one of its services) -> Attach
// (after: the worker id is known) -> Start -> ... -> Stop -> destruction (before the process).
// Thread-safety: the lifecycle from one thread; FillReport from the registry's; the drain
// controls from any.
#ifndef PDSERVE_DECODE_WORKER_DECODE_ROLE_H_
#define PDSERVE_DECODE_WORKER_DECODE_ROLE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/worker_reports.h"
#include "decode_worker/decode_metrics.h"
#include "decode_worker/decode_service.h"
#include "decode_worker/decode_worker_config.h"
#include "decode_worker/engine_loop.h"
#include "decode_worker/grpc_prefill_client.h"
#include "decode_worker/offload_coordinator.h"
#include "pdserve/v1/registry.pb.h"
#include "server/server_runner.h"
#include "worker/worker_process.h"

namespace pdserve::decode {

class DecodeRole {
 public:
  static absl::StatusOr<std::unique_ptr<DecodeRole>> Create(WorkerProcess* process,
                                                            const DecodeWorkerConfig& config);
  ~DecodeRole();

  HostedService service() const;
  // After the process's server started: the service learns the worker id, and with a
  // transport the pool is served to prefill workers.
  absl::Status Attach();
  WorkerRegistration Registration() const;
  // One load report (with draining set while the loop refuses new requests).
  void FillReport(bool reconnected, WorkerReport* report, PrefixCacheChanges* prefix);
  void Start();
  void Stop();

  // New requests are refused (UNAVAILABLE: the router places them elsewhere) / taken again.
  void BeginDrain() { loop_->BeginDrain(); }
  // As BeginDrain, leaving the decode role: requests that have given their clients nothing go
  // back to the router to be placed elsewhere (EngineLoop::BeginDrainHandingBack).
  void BeginDrainHandingBack() { loop_->BeginDrainHandingBack(); }
  void EndDrain() { loop_->EndDrain(); }
  // Waits until the role holds nothing: no sequence (running, waiting, awaiting KV) and no
  // block in use, reserved or quarantined (a writer not yet known to have stopped), and no
  // Generate call still open. Cached prefix blocks may remain (DropPrefixCache). False at
  // `deadline`.
  bool WaitUntilEmpty(absl::Time deadline);
  // Frees the prefix cache (the pool is about to hold another role's KV). Started only.
  int DropPrefixCache() { return loop_->DropPrefixCache(); }

  EngineLoop* loop() { return loop_.get(); }

 private:
  DecodeRole() = default;

  WorkerProcess* process_ = nullptr;
  DecodeWorkerConfig config_;
  std::unique_ptr<DecodeMetrics> metrics_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<GrpcPrefillClient> prefill_client_;  // Outlives offload_. Null without a
                                                       // KV transport.
  std::unique_ptr<OffloadCoordinator> offload_;        // Null without a KV transport.
  std::unique_ptr<DecodeService> service_;
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_DECODE_ROLE_H_
