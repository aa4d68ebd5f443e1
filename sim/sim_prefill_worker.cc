#include "sim/sim_prefill_worker.h"

#include <algorithm>

#include "common/logging.h"
#include "prefill_worker/batch_packer.h"
#include "prefill_worker/queue_order.h"

namespace pdserve::sim {
namespace {

double Square(double tokens) { return tokens * tokens; }

}  // namespace

PrefillOutcome PrefillOutcomeOf(const SimPrefillDone& done, uint64_t model_fingerprint) {
  return PrefillOutcome{.model_fingerprint = model_fingerprint,
                        .computed_tokens = done.job.prompt_tokens,
                        .prompt_tokens = done.job.prompt_tokens,
                        .compute_ms = done.compute_ms,
                        .batch_tokens = done.batch_tokens,
                        .batch_token_squares = done.batch_token_squares,
                        .transfer_tail_ms = done.transfer_tail_ms,
                        .transfer_bytes = static_cast<uint64_t>(done.transfer_bytes)};
}

double TransferEndMs(double compute_ms, double bytes, int layers, const LinkModel& link) {
  const int n = std::max(1, layers);
  const double per_layer_ms = bytes / n / link.bytes_per_ms;
  if (!link.layerwise) return compute_ms + n * per_layer_ms + link.latency_ms;
  return std::max(compute_ms / n + n * per_layer_ms, compute_ms + per_layer_ms) + link.latency_ms;
}

SimPrefillWorker::SimPrefillWorker(const WorkerShape& shape, const CostModelParams& timing,
                                   const LinkModel& link)
    : shape_(shape), timing_(timing), link_(link) {}

void SimPrefillWorker::Submit(const SimPrefillJob& job) {
  prefill::InsertByDue(queue_, job, [](const SimPrefillJob& j) { return j.due_ms; });
  queued_tokens_ += job.prompt_tokens;
  queued_token_squares_ += Square(job.prompt_tokens);
}

bool SimPrefillWorker::Withdraw(int request) {
  // Computing: the batch runs on (its time does not change); the job's KV is not delivered,
  // as the real worker stops writing a cancelled request's KV.
  auto running = std::find_if(running_.begin(), running_.end(),
                              [&](const SimPrefillDone& d) { return d.job.request == request; });
  if (running != running_.end()) {
    running_.erase(running);
    return true;
  }
  auto it = std::find_if(queue_.begin(), queue_.end(),
                         [&](const SimPrefillJob& j) { return j.request == request; });
  if (it == queue_.end()) return false;
  queued_tokens_ -= it->prompt_tokens;
  queued_token_squares_ -= Square(it->prompt_tokens);
  queue_.erase(it);
  if (queue_.empty()) queued_token_squares_ = 0;
  return true;
}

double SimPrefillWorker::StartBatch(double now_ms) {
  if (busy_ || queue_.empty()) return -1;
  const int pool_blocks =
      shape_.prefill_kv_blocks > 0 ? shape_.prefill_kv_blocks : shape_.kv_layout.num_blocks;
  prefill::BatchPacker packer(shape_.prefill_max_batch_tokens, shape_.kv_layout.block_size,
                              pool_blocks);
  std::vector<PrefillPiece> pieces;
  double bytes = 0;
  running_.clear();
  running_tokens_ = 0;
  while (!queue_.empty() && packer.TryAdd(queue_.front().prompt_tokens)) {
    const SimPrefillJob& job = queue_.front();
    // Each prompt's tokens and its own causal attention (prompts do not attend to each other).
    pieces.push_back({.tokens = static_cast<double>(job.prompt_tokens), .cached = 0});
    SimPrefillDone done;
    done.job = job;
    done.queue_ms = now_ms - job.arrival_ms;
    done.transfer_bytes = static_cast<double>(job.transfer_tokens) * shape_.kv_bytes_per_token();
    bytes += done.transfer_bytes;
    running_.push_back(done);
    running_tokens_ += job.prompt_tokens;
    queued_tokens_ -= job.prompt_tokens;
    queued_token_squares_ -= Square(job.prompt_tokens);
    queue_.pop_front();
  }
  const double compute_ms = timing_.PrefillBatchMs(pieces);
  const double end_ms = TransferEndMs(compute_ms, bytes, shape_.kv_layout.num_layers, link_);
  running_token_squares_ = 0;
  for (const PrefillPiece& piece : pieces) running_token_squares_ += Square(piece.tokens);
  for (SimPrefillDone& d : running_) {
    d.compute_ms = compute_ms;
    d.batch_tokens = running_tokens_;
    d.batch_token_squares = running_token_squares_;
    d.transfer_tail_ms = end_ms - compute_ms;
  }
  running_compute_ms_ = compute_ms;
  busy_ = true;
  return end_ms;
}

std::vector<SimPrefillDone> SimPrefillWorker::FinishBatch() {
  PDS_CHECK(busy_) << "no batch is running";
  busy_ = false;
  // Recent throughput as the real batcher reports it, once a batch ends: an exponential
  // average over batches.
  const double tps = running_tokens_ / std::max(1e-9, running_compute_ms_ / 1e3);
  tokens_per_second_ = tokens_per_second_ == 0 ? tps : 0.7 * tokens_per_second_ + 0.3 * tps;
  running_tokens_ = 0;
  running_token_squares_ = 0;
  if (queue_.empty()) queued_token_squares_ = 0;  // No rounding left over when empty.
  return std::move(running_);
}

LoadSnapshot SimPrefillWorker::Load() const {
  LoadSnapshot s;
  s.running = busy_ ? static_cast<int>(running_.size()) : 0;
  s.waiting = static_cast<int>(queue_.size());
  s.pending_prefill_tokens = queued_tokens_ + running_tokens_;
  s.pending_prefill_token_squares = queued_token_squares_ + running_token_squares_;
  s.prefill_tokens_per_second = tokens_per_second_;
  return s;
}

}  // namespace pdserve::sim
