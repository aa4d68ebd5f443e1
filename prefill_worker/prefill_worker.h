// A prefill worker process, assembled: a worker process (model, its own KV pool registered
// with UCX: the source of every transfer, servers, registry client) with the prefill role
// (batcher, gRPC Prefill service). main.cc parses flags into PrefillWorkerConfig and calls
// Create + Run.
// Thread-safety: Create/Run/destruction from the main thread.
#ifndef PDSERVE_PREFILL_WORKER_PREFILL_WORKER_H_
#define PDSERVE_PREFILL_WORKER_PREFILL_WORKER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/shutdown_signal.h"
#include "prefill_worker/prefill_batcher.h"
#include "prefill_worker/prefill_role.h"
#include "worker/worker_process.h"

namespace pdserve::prefill {

struct PrefillWorkerConfig {
  // What every worker has: model, addresses, router, engine, KV pool (512 MiB by default:
  // it holds one batch; block size and dtype must match the decode workers'), UCX.
  WorkerProcessConfig process;
  PrefillBatcherConfig batcher;

  WorkerProcessConfig EffectiveProcess() const;
  absl::Status Validate() const;
};

class PrefillWorker {
 public:
  static absl::StatusOr<std::unique_ptr<PrefillWorker>> Create(const PrefillWorkerConfig& config);
  ~PrefillWorker();
  void Run(ShutdownSignal& shutdown);

 private:
  PrefillWorker() = default;

  std::unique_ptr<WorkerProcess> process_;  // Model, KV pool, transport, servers.
  std::unique_ptr<PrefillRole> role_;
};

}  // namespace pdserve::prefill

#endif  // PDSERVE_PREFILL_WORKER_PREFILL_WORKER_H_
