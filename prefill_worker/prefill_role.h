// The prefill role's parts, built over a worker process (its model, pool as the source of
// every transfer, transport and servers): metrics, the batcher and the Prefill service. A
// prefill worker is a process with this role; a role-switching worker holds it beside the
// decode role and turns it on and off.
// Order: Create (before the server starts: service() is one of its services) -> Attach
// (after: the worker id is known) -> Start -> ... -> Stop -> destruction (before the process).
// Thread-safety: the lifecycle from one thread; FillReport from the registry's; the drain
// controls from any.
#ifndef PDSERVE_PREFILL_WORKER_PREFILL_ROLE_H_
#define PDSERVE_PREFILL_WORKER_PREFILL_ROLE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/worker_reports.h"
#include "pdserve/v1/registry.pb.h"
#include "prefill_worker/prefill_batcher.h"
#include "prefill_worker/prefill_metrics.h"
#include "prefill_worker/prefill_service.h"
#include "server/server_runner.h"
#include "worker/worker_process.h"

namespace pdserve::prefill {

class PrefillRole {
 public:
  // `process` must have a KV transport (every prefill ships its KV).
  static absl::StatusOr<std::unique_ptr<PrefillRole>> Create(WorkerProcess* process,
                                                             const PrefillBatcherConfig& config);
  ~PrefillRole();

  HostedService service() const;
  // After the process's server started: the service learns the worker id.
  void Attach();
  WorkerRegistration Registration() const;
  // One load report (with draining set while the batcher refuses new prefills).
  void FillReport(WorkerReport* report) const;
  void Start();
  void Stop();

  // New prefills are refused (UNAVAILABLE: the decode worker tries another or prefills
  // locally) / taken again.
  void BeginDrain() { batcher_->BeginDrain(); }
  void EndDrain() { batcher_->EndDrain(); }
  // Waits until no prefill is queued or computing; false at `deadline`.
  bool WaitUntilEmpty(absl::Time deadline) const;

 private:
  PrefillRole() = default;

  WorkerProcess* process_ = nullptr;
  PrefillBatcherConfig config_;
  std::unique_ptr<PrefillMetrics> metrics_;
  std::unique_ptr<PrefillBatcher> batcher_;
  std::unique_ptr<PrefillService> service_;
};

}  // namespace pdserve::prefill

#endif  // PDSERVE_PREFILL_WORKER_PREFILL_ROLE_H_
