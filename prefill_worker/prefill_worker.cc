#include "prefill_worker/prefill_worker.h"

#include <algorithm>

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
  w->config_ = config;
  ASSIGN_OR_RETURN(w->process_, WorkerProcess::Create(config.EffectiveProcess()));
  WorkerProcess& process = *w->process_;
  engine::Model& model = process.model();
  w->metrics_ =
      std::make_unique<PrefillMetrics>(*process.metrics_registry(), process.loaded_model().name);
  w->batcher_ = std::make_unique<PrefillBatcher>(&model, &process.pool(), process.transport(),
                                                 process.transport_pool(), config.batcher,
                                                 w->metrics_.get(), process.staging());
  w->service_ = std::make_unique<PrefillService>(w->batcher_.get(), model.config().vocab_size,
                                                 process.epoch());
  RETURN_IF_ERROR(process.StartServer({{w->service_.get(), v1::Prefill::service_full_name()}}));
  w->service_->SetWorkerId(process.worker_id());
  PDS_LOG(INFO) << "prefill worker " << process.worker_id() << ": transfer "
                << config.batcher.transfer_mode;
  return w;
}

v1::WorkerRegistration PrefillWorker::Registration() const {
  v1::WorkerRegistration r = process_->BaseRegistration(v1::WORKER_ROLE_PREFILL);
  r.set_max_num_batched_tokens(config_.batcher.max_batch_tokens);
  return r;
}

void PrefillWorker::Run(ShutdownSignal& shutdown) {
  batcher_->Start();
  process_->Serve(
      shutdown, Registration(),
      [this](bool, v1::LoadReport* load, v1::PrefixCacheEvents*) {
        load->set_running(batcher_->running());
        load->set_pending_prefill_tokens(
            static_cast<uint64_t>(std::max<int64_t>(0, batcher_->pending_tokens())));
        load->set_prefill_tokens_per_second(batcher_->tokens_per_second());
        load->set_transfer_bytes_per_second(batcher_->transfer_bytes_per_second());
      },
      [this] { batcher_->BeginDrain(); });
  batcher_->Stop();
}

PrefillWorker::~PrefillWorker() {
  if (process_) process_->StopServing();  // No call reaches the service after this.
  if (batcher_) batcher_->Stop();
  service_.reset();
  batcher_.reset();
  process_.reset();  // The pool and the transport last.
}

}  // namespace pdserve::prefill
