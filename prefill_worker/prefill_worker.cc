#include "prefill_worker/prefill_worker.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/status_macros.h"
#include "engine/kv_pool.h"
#include "proto/bridge/request_bridge.h"

namespace pdserve::prefill {

absl::Status PrefillWorkerConfig::Validate() const {
  if (model_dir.empty()) return absl::InvalidArgumentError("--model: required");
  RETURN_IF_ERROR(server.Validate());
  RETURN_IF_ERROR(engine.Validate());
  RETURN_IF_ERROR(batcher.Validate());
  RETURN_IF_ERROR(transport.Validate());
  if (block_size < 1 || (block_size & (block_size - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--block_size: ", block_size, " must be a power of two"));
  }
  if (kv_cache_bytes < (1 << 20)) return absl::InvalidArgumentError("--kv_cache_bytes: below 1 MiB");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PrefillWorker>> PrefillWorker::Create(const PrefillWorkerConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<PrefillWorker> w(new PrefillWorker());
  w->config_ = config;
  w->epoch_ = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  ASSIGN_OR_RETURN(w->model_, engine::LoadModel(config.model_dir, config.engine));
  engine::Model& model = *w->model_.model;
  KvLayout layout = model.MakeKvLayout(1, config.block_size, config.kv_dtype);
  layout.num_blocks = engine::KvPool::BlocksForBytes(layout, config.kv_cache_bytes);
  if (layout.num_blocks < 2) return absl::InvalidArgumentError("--kv_cache_bytes: too small for two blocks");
  ASSIGN_OR_RETURN(w->transport_, kvtransfer::MakeKvTransport(config.transport));
  ASSIGN_OR_RETURN(w->transport_pool_, w->transport_->CreatePool(layout));
  ASSIGN_OR_RETURN(w->pool_, engine::KvPool::Wrap(layout, w->transport_pool_->base(), w->transport_pool_->bytes()));
  w->registry_ = std::make_shared<prometheus::Registry>();
  w->metrics_ = std::make_unique<PrefillMetrics>(*w->registry_, w->model_.name);
  w->batcher_ = std::make_unique<PrefillBatcher>(&model, w->pool_.get(), w->transport_.get(), w->transport_pool_.get(),
                                                 config.batcher, w->metrics_.get());
  w->service_ = std::make_unique<PrefillService>(w->batcher_.get(), model.config().vocab_size, w->epoch_);
  ASSIGN_OR_RETURN(w->server_, ServerRunner::Start(config.server, {{w->service_.get(), v1::Prefill::service_full_name()}},
                                                   w->registry_, "prefill"));
  ASSIGN_OR_RETURN(HostPort bound, ParseHostPort(w->server_->grpc_address(), "grpc address"));
  if (!config.advertise_host.empty()) bound.host = config.advertise_host;
  w->advertised_address_ = bound.ToString();
  w->worker_id_ = config.worker_id.empty() ? absl::StrCat("prefill-", w->advertised_address_) : config.worker_id;
  w->service_->SetWorkerId(w->worker_id_);
  PDS_LOG(INFO) << "prefill worker " << w->worker_id_ << ": " << w->model_.name << ", pool " << layout.DebugString()
                << ", transfer " << config.batcher.transfer_mode;
  return w;
}

v1::WorkerRegistration PrefillWorker::Registration() const {
  v1::WorkerRegistration r = bridge::BaseRegistration(
      v1::WORKER_ROLE_PREFILL, worker_id_, advertised_address_, server_->metrics_address(), model_.name,
      model_.model->fingerprint(), model_.model->config(), pool_->layout(), epoch_);
  r.set_max_num_batched_tokens(config_.batcher.max_batch_tokens);
  return r;
}

void PrefillWorker::Run(ShutdownSignal& shutdown) {
  batcher_->Start();
  registry_client_ = std::make_unique<RegistryClient>(
      config_.registry, Registration(), [this](bool, v1::LoadReport* load, v1::PrefixCacheEvents*) {
        load->set_running(batcher_->running());
        load->set_pending_prefill_tokens(static_cast<uint64_t>(std::max<int64_t>(0, batcher_->pending_tokens())));
        load->set_prefill_tokens_per_second(batcher_->tokens_per_second());
        load->set_transfer_bytes_per_second(batcher_->transfer_bytes_per_second());
      });
  registry_client_->Start();
  server_->SetServing(true);
  server_->RunUntilShutdown(shutdown, [this] { batcher_->BeginDrain(); });
  registry_client_->Stop();
  batcher_->Stop();
}

PrefillWorker::~PrefillWorker() {
  if (registry_client_) registry_client_->Stop();
  if (batcher_) batcher_->Stop();
  server_.reset();
  service_.reset();
  batcher_.reset();
  pool_.reset();
  transport_pool_.reset();
  transport_.reset();
}

}  // namespace pdserve::prefill
