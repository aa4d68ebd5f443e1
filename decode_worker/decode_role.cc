#include "decode_worker/decode_role.h"

#include <algorithm>

#include "common/status_macros.h"
#include "wire/report_bridge.h"

namespace pdserve::decode {

absl::StatusOr<std::unique_ptr<DecodeRole>> DecodeRole::Create(WorkerProcess* process,
                                                               const DecodeWorkerConfig& config) {
  std::unique_ptr<DecodeRole> r(new DecodeRole());
  r->process_ = process;
  r->config_ = config;
  engine::Model& model = process->model();
  const engine::LoadedModel& loaded = process->loaded_model();
  const KvLayout& layout = process->pool().layout();

  r->metrics_ = std::make_unique<DecodeMetrics>(*process->metrics_registry(), loaded.name);
  SchedulerConfig scheduler = config.EffectiveScheduler();
  scheduler.block_size = layout.block_size;
  scheduler.model_fingerprint = model.fingerprint();
  r->loop_ = std::make_unique<EngineLoop>(&model, &process->pool(), loaded.eos_token_ids, scheduler,
                                          r->metrics_.get(), Clock::Real());
  DecodeServiceOptions options;
  options.epoch = process->epoch();
  options.eos_token_ids = loaded.eos_token_ids;
  options.limits.model_name = loaded.name;
  options.limits.vocab_size = model.config().vocab_size;
  options.limits.max_context_tokens =
      config.max_model_len > 0
          ? std::min(config.max_model_len, model.config().max_position_embeddings)
          : model.config().max_position_embeddings;
  options.limits.max_sequence_tokens =
      static_cast<int64_t>(layout.num_blocks) * layout.block_size - 1;
  r->service_ = std::make_unique<DecodeService>(r->loop_.get(), loaded.tokenizer.get(), options,
                                                Clock::Real(), r->metrics_.get());
  return r;
}

HostedService DecodeRole::service() const {
  return {service_.get(), v1::Decode::service_full_name()};
}

absl::Status DecodeRole::Attach() {
  WorkerProcess& process = *process_;
  if (process.transport() != nullptr) {
    ASSIGN_OR_RETURN(
        kvtransfer::KvPoolDescriptor descriptor,
        process.transport()->ServePool(process.transport_pool(), process.worker_id(),
                                       process.model().fingerprint(), process.epoch()));
    prefill_client_ = std::make_unique<GrpcPrefillClient>(process.security());
    offload_ = std::make_unique<OffloadCoordinator>(loop_.get(), process.transport(),
                                                    std::move(descriptor), prefill_client_.get(),
                                                    Clock::Real(), config_.offload);
    offload_->Attach();
    OffloadCoordinator* offload = offload_.get();
    service_->SetOffloadHandler([offload](std::unique_ptr<Sequence> seq,
                                          std::vector<PrefillTarget> targets,
                                          OffloadBudget budget) {
      return offload->Handle(std::move(seq), std::move(targets), budget);
    });
  }
  // The service learns its id only now that the address is known (health is NOT_SERVING).
  service_->SetWorkerId(process.worker_id());
  return absl::OkStatus();
}

WorkerRegistration DecodeRole::Registration() const {
  WorkerRegistration r = process_->BaseRegistration(WorkerRole::kDecode);
  r.max_num_batched_tokens = config_.scheduler.max_num_batched_tokens;
  r.max_num_seqs = config_.scheduler.max_num_seqs;
  if (config_.max_model_len > 0) r.max_context_tokens = config_.max_model_len;
  return r;
}

void DecodeRole::FillReport(bool reconnected, WorkerReport* report, PrefixCacheChanges* prefix) {
  kvcache::PrefixCacheEvents events;
  loop_->TakeReport(reconnected, &report->steps, &events, &prefix->reset);
  report->load = loop_->Stats().load;
  report->load.draining = loop_->draining();
  prefix->stored = std::move(events.stored);
  prefix->evicted = std::move(events.evicted);
}

void DecodeRole::Start() { loop_->Start(); }

void DecodeRole::Stop() { loop_->Stop(); }

bool DecodeRole::WaitUntilEmpty(absl::Time deadline) {
  while (true) {
    const WorkerStats s = loop_->Stats();
    const kvcache::BlockCounts& b = s.blocks;
    // The streams too: a finished sequence's last message and status may still be on their
    // way out, and a role change closes the registration the router relays them by.
    if (s.running == 0 && s.waiting == 0 && s.awaiting_kv == 0 && b.in_use == 0 &&
        b.reserved == 0 && b.quarantined == 0 && service_->open_streams() == 0) {
      return true;
    }
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

DecodeRole::~DecodeRole() {
  if (loop_) loop_->Stop();
  service_.reset();
  offload_.reset();  // After the loop stopped, before the loop and the transport go.
  prefill_client_.reset();
  loop_.reset();
}

}  // namespace pdserve::decode
