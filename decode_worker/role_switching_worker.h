// A worker that can change role while it runs (pdserve-decode --role_switching): one process,
// one model and one KV pool, with both the decode role (engine loop, Decode service, offload
// path) and the prefill role (batcher, Prefill service) built over them; one of the two takes
// work, the other refuses it. When a router orders a switch (RouterMessage.switch_role, from
// `pdctl switch-role` or the router's planner) the worker:
//   1. stops taking work in its current role and says so in its load reports (draining), so
//      the router places nothing new on it;
//   2. waits until that role holds nothing: every stream finished (none is dropped), every
//      offloaded transfer done or known to have stopped writing; a decode role then drops its
//      prefix cache (the pool's memory is about to hold other KV). A decode role hands back
//      to the router every request that has given its client nothing yet (waiting, prefilling
//      locally, awaiting offloaded KV: the transfer is cancelled), which places it elsewhere;
//      it waits only for the streams that have started;
//   3. takes work in the other role and registers again in it (same worker id and epoch).
// If step 2 does not finish within switch_drain_timeout the switch is given up: the worker
// takes work in its old role again (the router counts the switch aborted).
// Thread-safety: Create/Run/destruction from the main thread; switches run on their own thread.
#ifndef PDSERVE_DECODE_WORKER_ROLE_SWITCHING_WORKER_H_
#define PDSERVE_DECODE_WORKER_ROLE_SWITCHING_WORKER_H_

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/shutdown_signal.h"
#include "decode_worker/decode_role.h"
#include "decode_worker/decode_worker_config.h"
#include "prefill_worker/prefill_role.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "worker/worker_process.h"

namespace pdserve::decode {

struct RoleSwitchingWorkerConfig {
  // The process and the decode role, as a decode worker's (its KV transport must be ucx:
  // the prefill role ships KV).
  DecodeWorkerConfig decode;
  // The prefill role's batcher.
  prefill::PrefillBatcherConfig prefill;
  // The role it starts in: "decode" or "prefill".
  std::string initial_role = "decode";
  // Longest a switch waits for the current role's work to finish before it is given up.
  // Default 10 minutes (a long generation may run that long).
  absl::Duration switch_drain_timeout = absl::Minutes(10);

  absl::Status Validate() const;
};

class RoleSwitchingWorker {
 public:
  static absl::StatusOr<std::unique_ptr<RoleSwitchingWorker>> Create(
      const RoleSwitchingWorkerConfig& config);
  ~RoleSwitchingWorker();

  // Serves until SIGTERM/SIGINT, switching role when told; then drains both roles.
  void Run(ShutdownSignal& shutdown);

 private:
  RoleSwitchingWorker() = default;
  WorkerRegistration Registration(v1::WorkerRole role) const;
  RegistryClient::ReportFn Report(v1::WorkerRole role);
  void RunSwitches();
  void Switch(v1::WorkerRole to, const std::string& reason);
  void PublishRole(v1::WorkerRole role);

  RoleSwitchingWorkerConfig config_;
  std::unique_ptr<WorkerProcess> process_;  // Model, KV pool, transport, servers.
  std::unique_ptr<DecodeRole> decode_;
  std::unique_ptr<prefill::PrefillRole> prefill_;
  prometheus::Gauge* decode_role_gauge_ = nullptr;   // pdserve_worker_role{role="decode"}
  prometheus::Gauge* prefill_role_gauge_ = nullptr;  // pdserve_worker_role{role="prefill"}
  prometheus::Family<prometheus::Counter>* switches_ = nullptr;  // {to, outcome}
  std::thread switcher_;

  absl::Mutex mu_;
  v1::WorkerRole role_ ABSL_GUARDED_BY(mu_) = v1::WORKER_ROLE_DECODE;
  std::optional<v1::RoleSwitch> order_ ABSL_GUARDED_BY(mu_);  // The next switch to run.
  bool switching_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_ROLE_SWITCHING_WORKER_H_
