// The command-line flags both worker binaries take (model, addresses, router, drain, engine,
// KV pool, UCX), defined once, and the two steps every worker main shares: reading those
// flags into a WorkerProcessConfig, and running the assembled worker to the end with the
// same exit codes (2: bad configuration, 1: failed to start, 0: drained after SIGTERM).
// Thread-safety: call from main() after ParseCommandLine.
#ifndef PDSERVE_WORKER_WORKER_FLAGS_H_
#define PDSERVE_WORKER_WORKER_FLAGS_H_

#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "common/logging.h"
#include "common/shutdown_signal.h"
#include "worker/worker_process.h"

namespace pdserve {

// The shared flags as a config for a worker of `role` ("decode" or "prefill"). Errors name
// the flag (e.g. an unknown --kv_dtype).
absl::StatusOr<WorkerProcessConfig> WorkerProcessConfigFromFlags(const std::string& role);

// Validates `config`, creates the worker and serves until `shutdown`; returns main's exit code.
template <typename Worker, typename Config>
int RunWorkerMain(const absl::StatusOr<Config>& config, ShutdownSignal& shutdown) {
  absl::Status valid = config.ok() ? config->Validate() : config.status();
  if (!valid.ok()) {
    std::fprintf(stderr, "%s\n", std::string(valid.message()).c_str());
    return 2;
  }
  auto worker = Worker::Create(*config);
  if (!worker.ok()) {
    PDS_LOG(ERROR) << worker.status();
    return 1;
  }
  (*worker)->Run(shutdown);
  return 0;
}

}  // namespace pdserve

#endif  // PDSERVE_WORKER_WORKER_FLAGS_H_
