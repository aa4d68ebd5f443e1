#include "decode_worker/decode_worker.h"

#include "common/status_macros.h"

namespace pdserve::decode {

absl::StatusOr<std::unique_ptr<DecodeWorker>> DecodeWorker::Create(
    const DecodeWorkerConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<DecodeWorker> w(new DecodeWorker());
  ASSIGN_OR_RETURN(w->process_, WorkerProcess::Create(config.EffectiveProcess()));
  ASSIGN_OR_RETURN(w->role_, DecodeRole::Create(w->process_.get(), config));
  RETURN_IF_ERROR(w->process_->StartServer({w->role_->service()}));
  RETURN_IF_ERROR(w->role_->Attach());
  return w;
}

void DecodeWorker::Run(ShutdownSignal& shutdown) {
  DecodeRole* role = role_.get();
  role->Start();
  process_->Serve(
      shutdown, role->Registration(),
      [role](bool reconnected, WorkerReport* report, PrefixCacheChanges* prefix) {
        role->FillReport(reconnected, report, prefix);
      },
      [role] { role->BeginDrain(); });
  role->Stop();
}

DecodeWorker::~DecodeWorker() {
  if (process_) process_->StopServing();  // No call reaches the service after this.
  role_.reset();
  process_.reset();  // The pool and the transport last.
}

}  // namespace pdserve::decode
