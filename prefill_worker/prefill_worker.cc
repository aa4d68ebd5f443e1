#include "prefill_worker/prefill_worker.h"

#include "common/logging.h"
#include "common/status_macros.h"

namespace pdserve::prefill {

WorkerProcessConfig PrefillWorkerConfig::EffectiveProcess() const {
  WorkerProcessConfig p = process;
  p.role = "prefill";
  p.kv_transport = true;  // The pool is the source of every transfer.
  return p;
}

absl::Status PrefillWorkerConfig::Validate() const {
  RETURN_IF_ERROR(EffectiveProcess().Validate());
  RETURN_IF_ERROR(batcher.Validate());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PrefillWorker>> PrefillWorker::Create(
    const PrefillWorkerConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<PrefillWorker> w(new PrefillWorker());
  ASSIGN_OR_RETURN(w->process_, WorkerProcess::Create(config.EffectiveProcess()));
  ASSIGN_OR_RETURN(w->role_, PrefillRole::Create(w->process_.get(), config.batcher));
  RETURN_IF_ERROR(w->process_->StartServer({w->role_->service()}));
  w->role_->Attach();
  return w;
}

void PrefillWorker::Run(ShutdownSignal& shutdown) {
  PrefillRole* role = role_.get();
  role->Start();
  process_->Serve(
      shutdown, role->Registration(),
      [role](bool, WorkerReport* report, PrefixCacheChanges*) { role->FillReport(report); },
      [role] { role->BeginDrain(); });
  role->Stop();
}

PrefillWorker::~PrefillWorker() {
  if (process_) process_->StopServing();  // No call reaches the service after this.
  role_.reset();
  process_.reset();  // The pool and the transport last.
}

}  // namespace pdserve::prefill
