#include "decode_worker/decode_worker.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "proto/bridge/report_bridge.h"

namespace pdserve::decode {

absl::StatusOr<std::unique_ptr<DecodeWorker>> DecodeWorker::Create(
    const DecodeWorkerConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<DecodeWorker> w(new DecodeWorker());
  w->config_ = config;
  ASSIGN_OR_RETURN(w->process_, WorkerProcess::Create(config.EffectiveProcess()));
  WorkerProcess& process = *w->process_;
  engine::Model& model = process.model();
  const engine::LoadedModel& loaded = process.loaded_model();
  const KvLayout& layout = process.pool().layout();

  w->metrics_ = std::make_unique<DecodeMetrics>(*process.metrics_registry(), loaded.name);
  SchedulerConfig scheduler = config.EffectiveScheduler();
  scheduler.block_size = layout.block_size;
  scheduler.model_fingerprint = model.fingerprint();
  w->loop_ = std::make_unique<EngineLoop>(&model, &process.pool(), loaded.tokenizer.get(),
                                          loaded.eos_token_ids, scheduler, w->metrics_.get(),
                                          Clock::Real());
  DecodeServiceOptions options;
  options.epoch = process.epoch();
  options.eos_token_ids = loaded.eos_token_ids;
  options.limits.model_name = loaded.name;
  options.limits.vocab_size = model.config().vocab_size;
  options.limits.max_context_tokens =
      config.max_model_len > 0
          ? std::min(config.max_model_len, model.config().max_position_embeddings)
          : model.config().max_position_embeddings;
  options.limits.max_sequence_tokens =
      static_cast<int64_t>(layout.num_blocks) * layout.block_size - 1;
  w->service_ = std::make_unique<DecodeService>(w->loop_.get(), loaded.tokenizer.get(), options,
                                                Clock::Real(), w->metrics_.get());
  RETURN_IF_ERROR(process.StartServer({{w->service_.get(), v1::Decode::service_full_name()}}));
  if (process.transport() != nullptr) {
    ASSIGN_OR_RETURN(kvtransfer::KvPoolDescriptor descriptor,
                     process.transport()->ServePool(process.transport_pool(), process.worker_id(),
                                                    model.fingerprint(), process.epoch()));
    w->prefill_client_ = std::make_unique<GrpcPrefillClient>(process.security());
    w->offload_ = std::make_unique<OffloadCoordinator>(
        w->loop_.get(), process.transport(), std::move(descriptor), w->prefill_client_.get(),
        Clock::Real(), config.offload, process.staging());
    w->offload_->Attach();
    OffloadCoordinator* offload = w->offload_.get();
    w->service_->SetOffloadHandler([offload](std::unique_ptr<Sequence> seq,
                                             std::vector<PrefillTarget> targets,
                                             OffloadBudget budget) {
      return offload->Handle(std::move(seq), std::move(targets), budget);
    });
  }
  // The service learns its id only now that the address is known (health is NOT_SERVING).
  w->service_->SetWorkerId(process.worker_id());
  return w;
}

v1::WorkerRegistration DecodeWorker::Registration() const {
  const engine::ModelConfig& c = process_->model().config();
  v1::WorkerRegistration r = process_->BaseRegistration(v1::WORKER_ROLE_DECODE);
  r.set_max_num_batched_tokens(config_.scheduler.max_num_batched_tokens);
  r.set_max_num_seqs(config_.scheduler.max_num_seqs);
  r.set_max_context_tokens(config_.max_model_len > 0 ? config_.max_model_len
                                                     : c.max_position_embeddings);
  return r;
}

void DecodeWorker::FillReport(bool reconnected, v1::LoadReport* load,
                              v1::PrefixCacheEvents* events) {
  WorkerReport report;
  engine::PrefixCacheEvents prefix;
  bool reset = false;
  loop_->TakeReport(reconnected, &report.steps, &prefix, &reset);
  report.load = loop_->Stats().load;
  bridge::ReportToProto(report, load);
  events->set_reset(reset);
  for (uint64_t h : prefix.stored) events->add_stored(h);
  for (uint64_t h : prefix.evicted) events->add_evicted(h);
}

void DecodeWorker::Run(ShutdownSignal& shutdown) {
  loop_->Start();
  process_->Serve(
      shutdown, Registration(),
      [this](bool reconnected, v1::LoadReport* load, v1::PrefixCacheEvents* events) {
        FillReport(reconnected, load, events);
      },
      [this] { loop_->BeginDrain(); });
  loop_->Stop();
}

DecodeWorker::~DecodeWorker() {
  if (process_) process_->StopServing();  // No call reaches the service after this.
  if (loop_) loop_->Stop();
  service_.reset();
  offload_.reset();  // After the loop stopped, before the loop and the transport go.
  prefill_client_.reset();
  loop_.reset();
  process_.reset();  // The pool and the transport last.
}

}  // namespace pdserve::decode
