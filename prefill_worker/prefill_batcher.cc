#include "prefill_worker/prefill_batcher.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "prefill_worker/batch_packer.h"
#include "prefill_worker/queue_order.h"

namespace pdserve::prefill {
namespace {

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

}  // namespace

// A job being computed: its cancellation request and whether it can still write.
struct PrefillBatcher::Active {
  std::atomic<bool> cancelled{false};
  absl::Mutex mu;
  bool stopped ABSL_GUARDED_BY(mu) = false;
  bool finished ABSL_GUARDED_BY(mu) = false;
  std::vector<std::function<void(const std::string&)>> waiters ABSL_GUARDED_BY(mu);

  // No write of this job can land any more: answer the cancellations waiting for that.
  void MarkStopped(bool finished_ok) {
    std::vector<std::function<void(const std::string&)>> to_call;
    {
      absl::MutexLock lock(&mu);
      if (stopped) return;
      stopped = true;
      finished = finished_ok;
      to_call.swap(waiters);
    }
    for (auto& w : to_call) w(finished_ok ? "done" : "computing");
  }
};

absl::Status PrefillBatcherConfig::Validate() const {
  if (max_batch_tokens < 1) return absl::InvalidArgumentError("--max_batch_tokens: must be >= 1");
  if (transfer_mode != "layerwise" && transfer_mode != "bulk") {
    return absl::InvalidArgumentError(
        absl::StrCat("--transfer_mode: '", transfer_mode, "' is not one of layerwise, bulk"));
  }
  return absl::OkStatus();
}

PrefillBatcher::PrefillBatcher(engine::Model* model, kvcache::KvPool* pool,
                               kvtransfer::KvTransport* transport,
                               kvtransfer::LocalPool* transport_pool,
                               const PrefillBatcherConfig& config, PrefillMetrics* metrics)
    : model_(model),
      pool_(pool),
      transport_(transport),
      transport_pool_(transport_pool),
      config_(config),
      metrics_(metrics),
      blocks_(pool->layout().num_blocks) {}

PrefillBatcher::~PrefillBatcher() { Stop(); }

void PrefillBatcher::Start() {
  thread_ = std::thread([this] { Run(); });
}

void PrefillBatcher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  std::deque<std::unique_ptr<PrefillJob>> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(queue_);
  }
  for (auto& job : left) {
    PrefillJobResult r;
    r.status = absl::UnavailableError("prefill worker stopped");
    job->done(r);
  }
}

absl::Status PrefillBatcher::Submit(std::unique_ptr<PrefillJob> job) {
  const KvLayout& own = pool_->layout();
  if (absl::Status s = kvtransfer::ValidateTarget(job->target, own, model_->fingerprint());
      !s.ok()) {
    metrics_
        ->Failure(s.code() == absl::StatusCode::kFailedPrecondition ? "layout_mismatch"
                                                                    : "bad_target")
        .Increment();
    return s;
  }
  const int prompt = static_cast<int>(job->prompt.size());
  if (job->first_position % own.block_size != 0 || job->first_position >= prompt) {
    return absl::InvalidArgumentError(absl::StrCat("target.first_position: ", job->first_position,
                                                   " must be a multiple of ", own.block_size,
                                                   " below the prompt length ", prompt));
  }
  const int suffix_blocks =
      (prompt + own.block_size - 1) / own.block_size - job->first_position / own.block_size;
  if (static_cast<int>(job->target.block_ids.size()) != suffix_blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("target.block_ids: ", job->target.block_ids.size(), " blocks for positions [",
                     job->first_position, ", ", prompt, "), expected ", suffix_blocks));
  }
  const int needed = (prompt + own.block_size - 1) / own.block_size;
  if (needed > own.num_blocks) {
    metrics_->Failure("too_long").Increment();
    return absl::ResourceExhaustedError(absl::StrCat("prompt: ", prompt, " tokens need ", needed,
                                                     " KV blocks; this prefill worker's pool has ",
                                                     own.num_blocks));
  }
  // A transport with a bounded pinned pool (staging) never fits a larger transfer: refused
  // before any compute, with the limit's flag.
  if (absl::Status s = transport_->CheckTransferSize(job->target.block_ids.size()); !s.ok()) {
    metrics_->Failure("too_long").Increment();
    return absl::ResourceExhaustedError(absl::StrCat("prompt: its ", s.message()));
  }
  absl::MutexLock lock(&mu_);
  if (stop_ || draining_)
    return absl::UnavailableError("prefill worker is draining; send the prefill elsewhere");
  CountPendingLocked(job->prompt.size(), +1);
  InsertByDue(queue_, std::move(job), [](const std::unique_ptr<PrefillJob>& j) { return j->due; });
  return absl::OkStatus();
}

void PrefillBatcher::Cancel(uint64_t token, std::function<void(const std::string& state)> stopped) {
  std::unique_ptr<PrefillJob> queued;
  std::shared_ptr<Active> active;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if ((*it)->target.token == token) {
        queued = std::move(*it);
        queue_.erase(it);
        CountPendingLocked(queued->prompt.size(), -1);
        break;
      }
    }
    if (!queued) {
      auto found = active_.find(token);
      if (found != active_.end()) active = found->second;
    }
  }
  if (queued) {
    metrics_->requests_cancelled.Increment();
    PrefillJobResult r;
    r.status = absl::CancelledError("prefill cancelled before it started");
    queued->done(r);
    stopped("queued");
    return;
  }
  if (!active) {
    stopped("unknown");
    return;
  }
  active->cancelled.store(true);
  std::string state;
  {
    absl::MutexLock lock(&active->mu);
    if (!active->stopped) {
      active->waiters.push_back(std::move(stopped));
      return;
    }
    state = active->finished ? "done" : "computing";
  }
  stopped(state);
}

void PrefillBatcher::RequestCancel(uint64_t token) {
  absl::MutexLock lock(&mu_);
  auto found = active_.find(token);
  if (found != active_.end()) found->second->cancelled.store(true);
}

void PrefillBatcher::BeginDrain() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

void PrefillBatcher::EndDrain() {
  absl::MutexLock lock(&mu_);
  draining_ = false;
}

bool PrefillBatcher::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

bool PrefillBatcher::idle() const {
  absl::MutexLock lock(&mu_);
  return queue_.empty() && active_.empty() && running_ == 0;
}

int64_t PrefillBatcher::pending_tokens() const {
  absl::MutexLock lock(&mu_);
  return pending_tokens_;
}

double PrefillBatcher::pending_token_squares() const {
  absl::MutexLock lock(&mu_);
  return pending_token_squares_;
}

void PrefillBatcher::CountPendingLocked(size_t tokens, int sign) {
  const auto n = static_cast<int64_t>(tokens);
  pending_tokens_ += sign * n;
  pending_token_squares_ = std::max(
      0.0, pending_token_squares_ + sign * static_cast<double>(n) * static_cast<double>(n));
  if (pending_tokens_ == 0) pending_token_squares_ = 0;  // No rounding left over when empty.
  metrics_->queue_tokens.Set(static_cast<double>(pending_tokens_));
}

int PrefillBatcher::running() const {
  absl::MutexLock lock(&mu_);
  return running_;
}

double PrefillBatcher::tokens_per_second() const {
  absl::MutexLock lock(&mu_);
  return tokens_per_second_;
}

double PrefillBatcher::transfer_bytes_per_second() const {
  absl::MutexLock lock(&mu_);
  return bytes_per_second_;
}

void PrefillBatcher::Run() {
  while (true) {
    std::vector<std::unique_ptr<PrefillJob>> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      BatchPacker packer(config_.max_batch_tokens, pool_->layout().block_size, blocks_.available());
      while (!queue_.empty()) {
        if (!packer.TryAdd(static_cast<int>(queue_.front()->prompt.size()))) break;
        // Registered as active while still under the lock, so a Cancel that no longer finds
        // the job queued always finds it here (never "unknown" while it may still write).
        active_[queue_.front()->target.token] = std::make_shared<Active>();
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      running_ = static_cast<int>(batch.size());
    }
    RunBatch(std::move(batch));
    absl::MutexLock lock(&mu_);
    running_ = 0;
  }
}

absl::StatusOr<std::unique_ptr<kvtransfer::OutboundTransfer>> PrefillBatcher::OpenTransfer(
    const PrefillJob& job) {
  auto transfer = transport_->Open(job.target, transport_pool_, model_->fingerprint());
  // Only a staging transport runs out of room at Open: a burst beyond its pinned pool is
  // refused before any compute (the decode worker tries elsewhere), never queued on it.
  if (absl::IsResourceExhausted(transfer.status())) metrics_->Failure("staging_full").Increment();
  return transfer;
}

// One job of a batch, from its opening to its answer.
struct PrefillBatcher::Entry {
  std::unique_ptr<PrefillJob> job;
  std::vector<int32_t> table;
  std::vector<int32_t> source_blocks;  // The suffix's blocks in this worker's pool.
  std::unique_ptr<kvtransfer::OutboundTransfer> transfer;
  std::shared_ptr<Active> active;
  bool computing = false;  // In the forward (blocks allocated, transfer open).
  bool aborted = false;
  absl::Status error;
  absl::Time first_write;
  PrefillJobResult result;

  // Stops the job's writes for `why` (nothing in flight can land after the abort) and
  // acknowledges the cancellations waiting for that.
  void StopWriting(absl::Status why) {
    aborted = true;
    error = std::move(why);
    const absl::Status s = transfer->Abort(absl::Seconds(10));
    // A dead receiver fails every abort of a batch at once: one line per burst says it.
    if (!s.ok()) PDS_LOG_EVERY_N_SEC(WARNING, 10) << job->request_id << ": abort: " << s;
    active->MarkStopped(false);
  }
};

std::vector<PrefillBatcher::Entry> PrefillBatcher::OpenBatch(
    std::vector<std::unique_ptr<PrefillJob>> jobs, absl::Time batch_start) {
  const int bs = pool_->layout().block_size;
  std::vector<Entry> entries;
  for (auto& job : jobs) {
    Entry e;
    {
      absl::MutexLock lock(&mu_);
      e.active = active_[job->target.token];
    }
    e.result.measured.queue_ms = Ms(batch_start - job->arrival);
    metrics_->queue_time.Observe(e.result.measured.queue_ms / 1e3);
    if (batch_start > job->deadline) {
      e.error = absl::DeadlineExceededError("prefill deadline passed while queued");
    } else {
      auto transfer = OpenTransfer(*job);
      if (transfer.ok()) {
        e.transfer = *std::move(transfer);
      } else {
        e.error = transfer.status();
      }
    }
    e.job = std::move(job);
    entries.push_back(std::move(e));
  }
  // Blocks for every job that can run.
  for (Entry& e : entries) {
    if (!e.error.ok()) continue;
    const int n = static_cast<int>(e.job->prompt.size());
    if (!blocks_.Allocate((n + bs - 1) / bs, &e.table)) {
      e.error = absl::ResourceExhaustedError("prefill worker pool exhausted");
      continue;
    }
    const int first = e.job->first_position / bs;
    e.source_blocks.assign(e.table.begin() + first,
                           e.table.begin() + first + e.job->target.block_ids.size());
    e.computing = true;
  }
  return entries;
}

int PrefillBatcher::WriteLayer(std::vector<Entry>& entries, int layer) {
  int live = 0;
  for (Entry& e : entries) {
    if (!e.computing || !e.error.ok() || e.aborted) continue;
    if (e.active->cancelled.load()) {
      e.StopWriting(absl::CancelledError("prefill cancelled"));
      metrics_->requests_cancelled.Increment();
      continue;
    }
    if (absl::Now() > e.job->deadline) {
      // The receiver frees these blocks once the deadline passed (it cannot tell a stopped
      // worker from a slow one): nothing may land after it.
      e.StopWriting(absl::DeadlineExceededError("prefill deadline passed while writing"));
      metrics_->Failure("deadline").Increment();
      continue;
    }
    if (e.first_write == absl::Time()) e.first_write = absl::Now();
    if (absl::Status s = e.transfer->WriteLayer(layer, e.source_blocks); !s.ok()) {
      e.StopWriting(s);
      metrics_->Failure("transfer").Increment();
      continue;
    }
    metrics_->transfer_layers.Increment();
    ++live;
  }
  return live;
}

void PrefillBatcher::FinishEntry(Entry& e, int row, const absl::Status& forward,
                                 absl::Time forward_end, const engine::Logits& logits) {
  if (e.error.ok() && !forward.ok()) e.error = forward;
  if (e.error.ok() && e.active->cancelled.load() && !e.aborted) {
    e.aborted = true;
    e.error = absl::CancelledError("prefill cancelled");
    e.transfer->Abort(absl::Seconds(10)).IgnoreError();
    metrics_->requests_cancelled.Increment();
  }
  if (!e.error.ok()) return;
  const absl::Duration budget = std::min(config_.finish_timeout, e.job->deadline - absl::Now());
  e.error = e.transfer->Finish(budget);
  const absl::Time finished = absl::Now();
  // The tail: what the transfer adds after the forward (the last layer's KV is written into
  // the pool, and its writes issued, before that layer's attention and MLP run).
  e.result.measured.transfer_tail_ms = Ms(finished - forward_end);
  e.result.measured.transfer_ms = Ms(finished - e.first_write);
  e.result.measured.transfer_bytes = e.transfer->bytes_written();
  if (!e.error.ok()) {
    metrics_->Failure("transfer").Increment();
    e.transfer->Abort(absl::Seconds(10)).IgnoreError();
    return;
  }
  e.result.first_token = logits.sampled[row];
  e.result.measured.computed_tokens = static_cast<int>(e.job->prompt.size());
  metrics_->transfer_time.Observe(e.result.measured.transfer_ms / 1e3);
  metrics_->transfer_tail.Observe(e.result.measured.transfer_tail_ms / 1e3);
  metrics_->transfer_bytes.Increment(static_cast<double>(e.result.measured.transfer_bytes));
  metrics_->prefill_tokens.Increment(static_cast<double>(e.job->prompt.size()));
  metrics_->requests_completed.Increment();
}

void PrefillBatcher::RunBatch(std::vector<std::unique_ptr<PrefillJob>> jobs) {
  const absl::Time batch_start = absl::Now();
  std::vector<Entry> entries = OpenBatch(std::move(jobs), batch_start);
  engine::PackedBatch batch;
  std::vector<engine::RowSampling> sample_rows;  // The first token of each, in batch order.
  // What the batch's compute time covers, reported with each of its prompts: the router
  // learns this worker's speed from the batch (router/learning.h), not one prompt of it.
  int64_t batch_tokens = 0;
  double batch_token_squares = 0;
  for (Entry& e : entries) {
    if (!e.computing) continue;
    const auto prompt_tokens = static_cast<double>(e.job->prompt.size());
    batch_tokens += static_cast<int64_t>(e.job->prompt.size());
    batch_token_squares += prompt_tokens * prompt_tokens;
    batch.Add(e.job->prompt, 0, e.table, true);
    sample_rows.push_back({&e.job->sampling, static_cast<uint64_t>(e.job->prompt.size())});
  }
  const bool layerwise = config_.transfer_mode == "layerwise";
  engine::ForwardOptions options;
  options.layer_hook = [&](int layer) {
    const int live = layerwise ? WriteLayer(entries, layer) : 1;
    if (config_.layer_delay > absl::ZeroDuration()) absl::SleepFor(config_.layer_delay);
    if (!layerwise) {
      // Bulk mode still honours cancellation between layers.
      bool any = false;
      for (Entry& e : entries) any |= e.computing && e.error.ok() && !e.active->cancelled.load();
      return any;
    }
    return live > 0;
  };
  engine::Logits logits;
  engine::SamplerScratch scratch;
  absl::Status forward = batch.num_tokens() > 0
                             ? engine::ForwardAndSample(*model_, batch, *pool_, options,
                                                        sample_rows, &logits, &scratch)
                             : absl::OkStatus();
  const absl::Time forward_end = absl::Now();
  const double compute_ms = Ms(forward_end - batch_start);
  if (!layerwise && forward.ok()) {
    for (int l = 0; l < model_->config().num_layers; ++l) WriteLayer(entries, l);
  }
  int row = 0;
  uint64_t batch_bytes = 0;
  double transfer_seconds = 0;
  for (Entry& e : entries) {
    const bool ran = e.computing;
    if (ran) {
      FinishEntry(e, row++, forward, forward_end, logits);
      if (e.error.ok()) {
        batch_bytes += e.result.measured.transfer_bytes;
        transfer_seconds += e.result.measured.transfer_ms / 1e3;
      }
    }
    e.result.measured.compute_ms = compute_ms;
    e.result.measured.batch_tokens = batch_tokens;
    e.result.measured.batch_token_squares = batch_token_squares;
    e.result.status = e.error;
    if (ran) {
      blocks_.Release(e.table);
    } else if (!e.error.ok()) {
      metrics_->Failure(e.error.code() == absl::StatusCode::kDeadlineExceeded ? "deadline" : "open")
          .Increment();
    }
    // From here this job writes nothing more: acknowledge waiting cancellations.
    e.active->MarkStopped(e.error.ok());
    absl::MutexLock lock(&mu_);
    active_.erase(e.job->target.token);
  }
  metrics_->prefill_time.Observe(compute_ms / 1e3);
  UpdateRates(entries, compute_ms, batch.num_tokens(), batch_bytes, transfer_seconds);
  for (Entry& e : entries) e.job->done(e.result);
}

void PrefillBatcher::UpdateRates(const std::vector<Entry>& entries, double compute_ms,
                                 int batch_tokens, uint64_t batch_bytes, double transfer_seconds) {
  absl::MutexLock lock(&mu_);
  for (const Entry& e : entries) CountPendingLocked(e.job->prompt.size(), -1);
  if (compute_ms > 0 && batch_tokens > 0) {
    const double tps = batch_tokens / (compute_ms / 1e3);
    tokens_per_second_ = tokens_per_second_ == 0 ? tps : 0.7 * tokens_per_second_ + 0.3 * tps;
    metrics_->prefill_tokens_per_second.Set(tokens_per_second_);
  }
  if (transfer_seconds > 0) {
    const double bw = batch_bytes / transfer_seconds;
    bytes_per_second_ = bytes_per_second_ == 0 ? bw : 0.7 * bytes_per_second_ + 0.3 * bw;
    metrics_->transfer_bandwidth.Set(bytes_per_second_);
  }
}

}  // namespace pdserve::prefill
