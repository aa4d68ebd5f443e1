#include "decode_worker/decode_worker.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/status_macros.h"
#include "engine/kv_pool.h"
#include "proto/bridge/request_bridge.h"

namespace pdserve::decode {

absl::StatusOr<std::unique_ptr<DecodeWorker>> DecodeWorker::Create(const DecodeWorkerConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<DecodeWorker> w(new DecodeWorker());
  w->config_ = config;
  w->epoch_ = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  const absl::Time load_start = absl::Now();
  ASSIGN_OR_RETURN(w->model_, engine::LoadModel(config.model_dir, config.engine));
  engine::Model& model = *w->model_.model;
  PDS_LOG(INFO) << "loaded " << w->model_.name << " (" << model.config().architecture << ", "
                << model.weight_bytes() / (1 << 20) << " MiB) in "
                << absl::FormatDuration(absl::Now() - load_start);

  // KV pool: allocated and registered by the transport when offload is enabled.
  KvLayout layout = model.MakeKvLayout(1, config.scheduler.block_size, config.kv_dtype);
  layout.num_blocks = config.num_blocks > 0 ? config.num_blocks
                                            : engine::KvPool::BlocksForBytes(layout, config.kv_cache_bytes);
  if (layout.num_blocks < 2) {
    const int64_t block_bytes = layout.region_bytes() * 2 * layout.num_layers;
    if (config.num_blocks > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--num_blocks: ", config.num_blocks, " is fewer than 2 KV blocks (of ", block_bytes, " bytes)"));
    }
    return absl::InvalidArgumentError(absl::StrCat("--kv_cache_bytes: ", config.kv_cache_bytes,
                                                   " holds fewer than 2 KV blocks of ", block_bytes, " bytes"));
  }
  if (config.kv_transport == "ucx") {
    ASSIGN_OR_RETURN(w->transport_, kvtransfer::MakeKvTransport(config.transport));
    ASSIGN_OR_RETURN(w->transport_pool_, w->transport_->CreatePool(layout));
    ASSIGN_OR_RETURN(w->pool_, engine::KvPool::Wrap(layout, w->transport_pool_->base(), w->transport_pool_->bytes()));
  } else {
    ASSIGN_OR_RETURN(w->pool_, engine::KvPool::Allocate(layout));
  }
  PDS_LOG(INFO) << "kv pool: " << layout.DebugString() << " (" << layout.pool_bytes() / (1 << 20) << " MiB, "
                << (w->transport_ ? "UCX-registered" : "local") << ")";

  w->registry_ = std::make_shared<prometheus::Registry>();
  w->metrics_ = std::make_unique<DecodeMetrics>(*w->registry_, w->model_.name);
  SchedulerConfig scheduler = config.scheduler;
  scheduler.model_fingerprint = model.fingerprint();
  w->loop_ = std::make_unique<EngineLoop>(&model, w->pool_.get(), w->model_.tokenizer.get(), w->model_.eos_token_ids,
                                          scheduler, w->metrics_.get(), Clock::Real());
  DecodeServiceOptions options;
  options.epoch = w->epoch_;
  options.eos_token_ids = w->model_.eos_token_ids;
  options.limits.model_name = w->model_.name;
  options.limits.vocab_size = model.config().vocab_size;
  options.limits.max_context_tokens = config.max_model_len > 0
                                          ? std::min(config.max_model_len, model.config().max_position_embeddings)
                                          : model.config().max_position_embeddings;
  options.limits.max_sequence_tokens = static_cast<int64_t>(layout.num_blocks) * layout.block_size - 1;
  w->service_ = std::make_unique<DecodeService>(w->loop_.get(), w->model_.tokenizer.get(), options, Clock::Real(),
                                                w->metrics_.get());
  ASSIGN_OR_RETURN(w->server_, ServerRunner::Start(config.server, {{w->service_.get(), v1::Decode::service_full_name()}},
                                                   w->registry_, "decode"));
  ASSIGN_OR_RETURN(HostPort bound, ParseHostPort(w->server_->grpc_address(), "grpc address"));
  if (!config.advertise_host.empty()) bound.host = config.advertise_host;
  w->advertised_address_ = bound.ToString();
  w->worker_id_ = config.worker_id.empty() ? absl::StrCat("decode-", w->advertised_address_) : config.worker_id;
  if (w->transport_) {
    ASSIGN_OR_RETURN(w->descriptor_, w->transport_->ServePool(w->transport_pool_.get(), w->worker_id_,
                                                              model.fingerprint(), w->epoch_));
  }
  // The service learns its id only now that the address is known (health is NOT_SERVING).
  w->service_->SetWorkerId(w->worker_id_);
  if (w->transport_) {
    w->offload_ = std::make_unique<OffloadCoordinator>(w->loop_.get(), w->transport_.get(), w->descriptor_,
                                                       config.offload);
    w->offload_->Attach();
    OffloadCoordinator* offload = w->offload_.get();
    w->service_->SetOffloadHandler([offload](std::unique_ptr<Sequence> seq, const v1::DecodeRequest& request,
                                             absl::Time deadline) {
      return offload->Handle(std::move(seq), request, deadline);
    });
  }
  return w;
}

v1::WorkerRegistration DecodeWorker::Registration() const {
  const engine::ModelConfig& c = model_.model->config();
  v1::WorkerRegistration r = bridge::BaseRegistration(v1::WORKER_ROLE_DECODE, worker_id_, advertised_address_,
                                                      server_->metrics_address(), model_.name,
                                                      model_.model->fingerprint(), c, pool_->layout(), epoch_);
  r.set_max_num_batched_tokens(config_.scheduler.max_num_batched_tokens);
  r.set_max_num_seqs(config_.scheduler.max_num_seqs);
  r.set_max_context_tokens(config_.max_model_len > 0 ? config_.max_model_len : c.max_position_embeddings);
  return r;
}

void DecodeWorker::Run(ShutdownSignal& shutdown) {
  loop_->Start();
  registry_client_ = std::make_unique<RegistryClient>(
      config_.registry, Registration(), [this](bool reconnected, v1::LoadReport* load, v1::PrefixCacheEvents* events) {
        std::vector<StepSample> steps;
        PrefixCacheEvents prefix;
        bool reset = false;
        loop_->TakeReport(reconnected, &steps, &prefix, &reset);
        const WorkerStats s = loop_->Stats();
        load->set_running(s.running);
        load->set_waiting(s.waiting);
        load->set_awaiting_kv(s.awaiting_kv);
        load->set_free_blocks(s.blocks.free + s.blocks.cached);
        load->set_total_blocks(s.blocks.total);
        load->set_pending_prefill_tokens(s.pending_prefill_tokens);
        for (const StepSample& step : steps) {
          v1::StepSample* out = load->add_recent_steps();
          out->set_num_decode(step.num_decode);
          out->set_num_prefill_tokens(step.num_prefill_tokens);
          out->set_context_tokens(step.context_tokens);
          out->set_duration_ms(step.duration_ms);
        }
        events->set_reset(reset);
        for (uint64_t h : prefix.stored) events->add_stored(h);
        for (uint64_t h : prefix.evicted) events->add_evicted(h);
      });
  registry_client_->Start();
  server_->SetServing(true);
  PDS_LOG(INFO) << "decode worker " << worker_id_ << " serving at " << advertised_address_;
  server_->RunUntilShutdown(shutdown, [this] { loop_->BeginDrain(); });
  registry_client_->Stop();
  loop_->Stop();
}

DecodeWorker::~DecodeWorker() {
  if (registry_client_) registry_client_->Stop();
  if (loop_) loop_->Stop();
  server_.reset();
  service_.reset();
  offload_.reset();  // After the loop stopped, before the loop and the transport go.
  loop_.reset();
  pool_.reset();
  transport_pool_.reset();
  transport_.reset();
}

}  // namespace pdserve::decode
