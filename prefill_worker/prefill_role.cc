#include "prefill_worker/prefill_role.h"

#include <algorithm>

#include "common/logging.h"
#include "common/status_macros.h"

namespace pdserve::prefill {

absl::StatusOr<std::unique_ptr<PrefillRole>> PrefillRole::Create(
    WorkerProcess* process, const PrefillBatcherConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  if (process->transport() == nullptr) {
    return absl::FailedPreconditionError(
        "the prefill role needs a KV transport (--kv_transport=ucx)");
  }
  std::unique_ptr<PrefillRole> r(new PrefillRole());
  r->process_ = process;
  r->config_ = config;
  engine::Model& model = process->model();
  r->metrics_ =
      std::make_unique<PrefillMetrics>(*process->metrics_registry(), process->loaded_model().name);
  r->batcher_ =
      std::make_unique<PrefillBatcher>(&model, &process->pool(), process->transport(),
                                       process->transport_pool(), config, r->metrics_.get());
  r->service_ = std::make_unique<PrefillService>(r->batcher_.get(), model.config().vocab_size,
                                                 process->epoch());
  return r;
}

HostedService PrefillRole::service() const {
  return {service_.get(), v1::Prefill::service_full_name()};
}

void PrefillRole::Attach() {
  service_->SetWorkerId(process_->worker_id());
  PDS_LOG(INFO) << "prefill role of " << process_->worker_id() << ": transfer "
                << config_.transfer_mode;
}

WorkerRegistration PrefillRole::Registration() const {
  WorkerRegistration r = process_->BaseRegistration(WorkerRole::kPrefill);
  r.max_num_batched_tokens = config_.max_batch_tokens;
  return r;
}

void PrefillRole::FillReport(WorkerReport* report) const {
  LoadSnapshot& load = report->load;
  load.running = batcher_->running();
  load.pending_prefill_tokens = std::max<int64_t>(0, batcher_->pending_tokens());
  load.pending_prefill_token_squares = batcher_->pending_token_squares();
  load.prefill_tokens_per_second = batcher_->tokens_per_second();
  load.transfer_bytes_per_second = batcher_->transfer_bytes_per_second();
  load.draining = batcher_->draining();
}

void PrefillRole::Start() { batcher_->Start(); }

void PrefillRole::Stop() { batcher_->Stop(); }

bool PrefillRole::WaitUntilEmpty(absl::Time deadline) const {
  while (!batcher_->idle()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

PrefillRole::~PrefillRole() {
  if (batcher_) batcher_->Stop();
  service_.reset();
  batcher_.reset();
}

}  // namespace pdserve::prefill
