#include "sim/sim_decode_worker.h"

#include <algorithm>
#include <memory>

#include "common/logging.h"
#include "decode_worker/step_report.h"

namespace pdserve::sim {
namespace {

decode::SchedulerConfig SchedulerConfigOf(const WorkerShape& shape, uint64_t fingerprint) {
  decode::SchedulerConfig c;
  c.block_size = shape.kv_layout.block_size;
  c.max_num_batched_tokens = shape.max_num_batched_tokens;
  c.max_num_seqs = shape.max_num_seqs;
  c.max_awaiting_kv = shape.max_awaiting_kv;
  c.model_fingerprint = fingerprint;
  return c;
}

}  // namespace

int32_t SimToken(int request, int index, int vocab_size) {
  uint64_t x = (static_cast<uint64_t>(request) << 32) ^ static_cast<uint32_t>(index);
  x ^= x >> 33;  // splitmix64's finaliser: distinct requests' outputs do not collide.
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return static_cast<int32_t>(x % static_cast<uint64_t>(vocab_size));
}

SimDecodeWorker::SimDecodeWorker(const WorkerShape& shape, uint64_t model_fingerprint)
    : shape_(shape),
      blocks_(shape.kv_layout.num_blocks),
      scheduler_(SchedulerConfigOf(shape, model_fingerprint), &blocks_) {}

decode::Sequence* SimDecodeWorker::Submit(int request, const std::vector<int32_t>& prompt,
                                          int max_tokens) {
  auto seq = std::make_unique<decode::Sequence>();
  seq->order = next_order_++;
  seq->tokens = prompt;
  seq->prompt_len = static_cast<int>(prompt.size());
  seq->sampling.max_tokens = max_tokens;
  decode::Sequence* raw = seq.get();
  meta_[raw] = Meta{.request = request, .max_tokens = max_tokens, .reserved = {}};
  scheduler_.Add(std::move(seq));
  return raw;
}

decode::Scheduler::TransferAdmission SimDecodeWorker::AdmitOrAwaitTransfer(
    decode::Sequence* seq, std::function<void(int)> start) {
  auto reserve_and_start = [this, start = std::move(start)](decode::Sequence* admitted) {
    Meta& m = meta_.at(admitted);
    m.reserved =
        decode::TransferBlocks(*admitted, admitted->num_computed, shape_.kv_layout.block_size);
    blocks_.MarkReserved(m.reserved, true);
    start(admitted->num_computed);
  };
  const auto admission = scheduler_.AdmitOrAwaitTransfer(seq, reserve_and_start);
  if (admission == decode::Scheduler::TransferAdmission::kAdmitted) reserve_and_start(seq);
  return admission;
}

std::vector<int> SimDecodeWorker::Unstarted() const {
  std::vector<int> out;
  for (const auto& [seq, meta] : meta_) {
    if (seq->generated() == 0) out.push_back(meta.request);
  }
  std::sort(out.begin(), out.end());  // The map's order is not deterministic.
  return out;
}

void SimDecodeWorker::HandBack(decode::Sequence* seq) {
  PDS_CHECK(!busy_) << "handing a request back during a step";
  PDS_CHECK(seq->generated() == 0) << "handing back a request that has tokens";
  Meta& m = meta_.at(seq);
  blocks_.MarkReserved(m.reserved, false);
  meta_.erase(seq);
  scheduler_.Finish(seq);
}

void SimDecodeWorker::KvArrived(decode::Sequence* seq, std::vector<Emission>* out) {
  Meta& m = meta_.at(seq);
  blocks_.MarkReserved(m.reserved, false);
  m.reserved.clear();
  scheduler_.TransferDone(seq, seq->prompt_len);
  seq->tokens.push_back(SimToken(m.request, seq->generated(), shape_.vocab_size));
  Emit(seq, out);
}

bool SimDecodeWorker::StartStep(StepObservation* step) {
  PDS_CHECK(!busy_) << "a step is already running";
  plan_ = scheduler_.PlanStep();
  decode::HandOverTransferAdmissions(plan_);
  if (plan_.empty()) return false;
  step_ = decode::ObserveStep(plan_);
  *step = step_;
  busy_ = true;
  return true;
}

void SimDecodeWorker::FinishStep(double duration_ms, std::vector<Emission>* out) {
  PDS_CHECK(busy_) << "no step is running";
  busy_ = false;
  sampled_.clear();
  for (const decode::PlannedChunk& c : plan_.chunks) {
    if (!c.want_logits) continue;
    // The token after the chunk, at output index (its end - prompt).
    sampled_.push_back(SimToken(meta_.at(c.seq).request, c.start + c.num_tokens - c.seq->prompt_len,
                                shape_.vocab_size));
  }
  scheduler_.ApplyStep(plan_, sampled_);
  for (const decode::PlannedChunk& c : plan_.chunks) {
    if (c.want_logits) Emit(c.seq, out);  // May finish (and free) the sequence.
  }
  step_.duration_ms = duration_ms;
  steps_.Add(step_);
  plan_ = decode::StepPlan();
}

void SimDecodeWorker::Emit(decode::Sequence* seq, std::vector<Emission>* out) {
  const Meta& m = meta_.at(seq);
  Emission e{.request = m.request, .first = seq->generated() == 1, .finished = false};
  if (seq->generated() >= m.max_tokens) {
    e.finished = true;
    meta_.erase(seq);
    scheduler_.Finish(seq);  // Frees the sequence.
  }
  out->push_back(e);
}

WorkerReport SimDecodeWorker::TakeReport() {
  return WorkerReport{.load = decode::DecodeLoad(scheduler_, blocks_.counts()),
                      .steps = steps_.Take()};
}

router::PrefixCacheUpdate SimDecodeWorker::TakePrefixEvents() {
  kvcache::PrefixCacheEvents events = blocks_.TakeEvents();
  router::PrefixCacheUpdate u;
  u.stored = std::move(events.stored);
  u.evicted = std::move(events.evicted);
  return u;
}

}  // namespace pdserve::sim
