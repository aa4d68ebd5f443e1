#include "decode_worker/engine_loop.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/hand_back.h"
#include "common/logging.h"
#include "common/retry_after.h"
#include "decode_worker/step_report.h"

namespace pdserve::decode {
namespace {

constexpr size_t kMaxPendingEvents = 1 << 16;
// Holding sequences none of which can step (awaiting KV, clients not reading), the loop
// re-plans every kIdleWait: their deadlines and cancellations are checked then, and so while
// the iteration hook has timed work (offload attempts, quarantined blocks). Otherwise nothing
// in it depends on time, so it sleeps until woken (a request, a posted task, a
// cancellation, a report asking for the prefix list all wake it), looking once every
// kEmptyWait: 64 idle emulated workers on two cores spent most of their CPU on 20 ms polls.
constexpr absl::Duration kIdleWait = absl::Milliseconds(20);
constexpr absl::Duration kEmptyWait = absl::Seconds(1);

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

}  // namespace

EngineLoop::EngineLoop(engine::Model* model, kvcache::KvPool* pool,
                       std::vector<int32_t> eos_token_ids, const SchedulerConfig& config,
                       DecodeMetrics* metrics, Clock* clock)
    : model_(model),
      pool_(pool),
      eos_(std::move(eos_token_ids)),
      config_(config),
      metrics_(metrics),
      clock_(clock),
      blocks_(pool->layout().num_blocks),
      scheduler_(config, &blocks_) {}

EngineLoop::~EngineLoop() { Stop(); }

void EngineLoop::Start() {
  PublishStats();
  thread_ = std::thread([this] { Run(); });
}

void EngineLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status EngineLoop::Submit(std::unique_ptr<Sequence> seq,
                                std::function<void(Sequence*)> on_added) {
  absl::MutexLock lock(&mu_);
  if (hand_back_) {
    return HandedBackError(
        "the decode worker is leaving the decode role; send the request elsewhere");
  }
  if (draining_ || stop_)
    return absl::UnavailableError("decode worker is draining; send the request elsewhere");
  if (stats_.waiting + static_cast<int>(inbox_.size()) >= config_.max_waiting) {
    return WithRetryAfter(
        absl::ResourceExhaustedError(absl::StrCat("decode worker overloaded: ", config_.max_waiting,
                                                  " requests already waiting")),
        config_.retry_after);
  }
  seq->order = ++next_order_;
  inbox_.push_back(Incoming{std::move(seq), std::move(on_added)});
  wake_ = true;
  return absl::OkStatus();
}

void EngineLoop::Post(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  posted_.push_back(std::move(fn));
  wake_ = true;
}

void EngineLoop::Notify() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

void EngineLoop::BeginDrain() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

void EngineLoop::BeginDrainHandingBack() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  hand_back_ = true;
  wake_ = true;
}

void EngineLoop::EndDrain() {
  absl::MutexLock lock(&mu_);
  draining_ = false;
  hand_back_ = false;
}

bool EngineLoop::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

int EngineLoop::DropPrefixCache() {
  absl::Notification done;
  int dropped = 0;
  Post([&] {
    dropped = blocks_.DropCache();
    PublishStats();
    done.Notify();
  });
  done.WaitForNotification();
  return dropped;
}

bool EngineLoop::WaitUntilIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return inbox_.empty() && stats_.running == 0 && stats_.waiting == 0 && stats_.awaiting_kv == 0;
  };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

WorkerStats EngineLoop::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void EngineLoop::TakeReport(bool request_reset, std::vector<StepObservation>* steps,
                            kvcache::PrefixCacheEvents* events, bool* reset) {
  absl::MutexLock lock(&mu_);
  reporting_ = true;
  if (request_reset) {
    reset_requested_ = true;
    reset_ready_ = false;
    wake_ = true;
  }
  *steps = steps_.Take();
  *reset = false;
  if (reset_requested_ && !reset_ready_) return;  // The loop has not built the full list yet.
  *reset = reset_ready_;
  reset_ready_ = false;
  reset_requested_ = false;
  *events = std::move(events_);
  events_ = {};
}

void EngineLoop::SetAwaitingKvEndHandler(std::function<void(Sequence*, AwaitingKvEnd)> handler) {
  awaiting_kv_end_ = std::move(handler);
}

void EngineLoop::SetIterationHook(std::function<bool()> hook) { iteration_hook_ = std::move(hook); }

void EngineLoop::CountOffload(bool completed, const std::string& fallback_cause) {
  if (completed) {
    ++offload_completions_;
    metrics_->offload_completions.Increment();
  } else {
    ++offload_fallbacks_;
    metrics_->OffloadFallback(fallback_cause).Increment();
  }
}

void EngineLoop::ObserveKvWait(absl::Duration waited) {
  metrics_->kv_transfer_wait.Observe(absl::ToDoubleSeconds(waited));
}

void EngineLoop::PublishStats() {
  const kvcache::BlockCounts counts = blocks_.counts();
  kvcache::PrefixCacheEvents events = blocks_.TakeEvents();
  const SchedulerCounters& c = scheduler_.counters();
  metrics_->num_requests_running.Set(scheduler_.num_running());
  metrics_->num_requests_waiting.Set(scheduler_.num_waiting());
  metrics_->num_requests_awaiting_kv.Set(scheduler_.num_awaiting_kv());
  metrics_->kv_cache_usage.Set(
      counts.total == 0 ? 0.0 : 1.0 - double(counts.free + counts.cached) / counts.total);
  metrics_->kv_blocks_free.Set(counts.free + counts.cached);
  metrics_->kv_blocks_quarantined.Set(counts.quarantined);
  metrics_->prefix_cache_queries.Increment(
      static_cast<double>(c.prefix_queried_tokens - published_counters_.prefix_queried_tokens));
  metrics_->prefix_cache_hits.Increment(
      static_cast<double>(c.prefix_hit_tokens - published_counters_.prefix_hit_tokens));
  metrics_->preemptions.Increment(
      static_cast<double>(c.preemptions - published_counters_.preemptions));
  metrics_->fairness_preemptions.Increment(
      static_cast<double>(c.fairness_preemptions - published_counters_.fairness_preemptions));
  published_counters_ = c;

  absl::MutexLock lock(&mu_);
  stats_.load = DecodeLoad(scheduler_, counts);
  stats_.blocks = counts;
  stats_.running = scheduler_.num_running();
  stats_.waiting = scheduler_.num_waiting();
  stats_.awaiting_kv = scheduler_.num_awaiting_kv();
  stats_.pending_prefill_tokens = stats_.load.pending_prefill_tokens;
  stats_.counters = c;
  stats_.requests_finished = requests_finished_;
  stats_.offload_fallbacks = offload_fallbacks_;
  stats_.offload_completions = offload_completions_;
  if (reporting_) {
    if (reset_requested_ && !reset_ready_) {
      events_ = {};
      events_.stored = blocks_.CachedHashes();
      reset_ready_ = true;
    } else if (events_.stored.size() + events_.evicted.size() < kMaxPendingEvents) {
      events_.stored.insert(events_.stored.end(), events.stored.begin(), events.stored.end());
      events_.evicted.insert(events_.evicted.end(), events.evicted.begin(), events.evicted.end());
    } else {
      reset_requested_ = true;  // Too far behind: resync instead of growing without bound.
      reset_ready_ = false;
    }
  }
}

void EngineLoop::FinishSequence(Sequence* seq, text::FinishReason reason,
                                const std::string& error) {
  const absl::Time now = clock_->Now();
  StreamSink::Final f;
  f.finish_reason = static_cast<int>(reason);
  if (seq->stream != nullptr) {
    // Text held back for stop strings is released unless a stop string cut it.
    std::string rest = reason == text::FinishReason::kStop ? "" : seq->stream->Finish();
    if (!rest.empty() && seq->sink) seq->sink->PushTokens({}, rest, absl::ToUnixNanos(now));
  }
  f.error_message = error;
  f.prompt_tokens = seq->prompt_len;
  f.cached_prompt_tokens = seq->cached_prompt_tokens;
  f.completion_tokens = seq->generated();
  const absl::Time admitted = seq->admitted == absl::Time() ? now : seq->admitted;
  f.queue_ms = Ms(admitted - seq->arrival);
  const OffloadOutcome& o = seq->offload;
  if (seq->prefill_done != absl::Time()) {
    // After a fallback the local prefill starts when the offload was given up (or at a later
    // admission); the time before is offload_wait_ms.
    f.prefill_ms = Ms(seq->prefill_done - std::max(admitted, o.fell_back_at));
  }
  if (o.offloaded) {
    f.offloaded = true;
    f.prefill_worker_id = o.prefill_worker_id;
    f.prefill_ms = o.prefill.compute_ms;
    f.offload = o.prefill;
  }
  f.fell_back_to_local = o.fell_back_to_local;
  f.fallback_cause = o.fallback_cause;
  f.offload_wait_ms = o.offload_wait_ms;
  if (seq->first_token != absl::Time()) {
    f.ttft_ms = Ms(seq->first_token - seq->arrival);
    f.decode_ms = Ms(seq->last_token - seq->first_token);
  }
  f.e2e_ms = Ms(now - seq->arrival);
  metrics_->e2e_request_latency.Observe(f.e2e_ms / 1e3);
  metrics_->RequestSuccess(text::FinishReasonName(reason)).Increment();
  metrics_->generation_tokens.Increment(std::max(0, seq->generated()));
  metrics_->prompt_tokens.Increment(seq->prompt_len);
  if (seq->sink) seq->sink->Finish(f);
  ++requests_finished_;
  scheduler_.Finish(seq);
}

bool EngineLoop::EmitToken(Sequence* seq) {
  const absl::Time now = clock_->Now();
  const int32_t token = seq->tokens.back();
  if (seq->first_token == absl::Time()) {
    seq->first_token = now;
    if (seq->prefill_done == absl::Time()) seq->prefill_done = now;
    metrics_->time_to_first_token.Observe(absl::ToDoubleSeconds(now - seq->arrival));
    if (seq->admitted != absl::Time()) {
      metrics_->request_prefill_time.Observe(
          absl::ToDoubleSeconds(seq->prefill_done - seq->admitted));
    }
  } else {
    metrics_->inter_token_latency.Observe(absl::ToDoubleSeconds(now - seq->last_token));
  }
  seq->last_token = now;
  auto update = seq->stream->Push(token);
  if (!update.ok()) {
    FinishSequence(seq, text::FinishReason::kError, std::string(update.status().message()));
    return false;
  }
  if (seq->sink) seq->sink->PushTokens({token}, update->text, absl::ToUnixNanos(now));
  if (update->finish != text::FinishReason::kNone) {
    FinishSequence(seq, update->finish);
    return false;
  }
  if (seq->num_tokens() >= model_->config().max_position_embeddings) {
    FinishSequence(seq, text::FinishReason::kLength);
    return false;
  }
  return true;
}

void EngineLoop::RetireCancelled() {
  std::vector<Sequence*> all = scheduler_.waiting();
  all.insert(all.end(), scheduler_.running().begin(), scheduler_.running().end());
  for (Sequence* seq : all) {
    if (seq->sink == nullptr || !seq->sink->cancelled()) continue;
    if (seq->state == SequenceState::kAwaitingKv && awaiting_kv_end_) {
      awaiting_kv_end_(seq, AwaitingKvEnd::kCancelled);  // The coordinator stops its transfer.
      continue;
    }
    FinishSequence(seq, text::FinishReason::kCancelled);
  }
}

void EngineLoop::HandBackUnstarted() {
  std::vector<Sequence*> all = scheduler_.waiting();
  all.insert(all.end(), scheduler_.running().begin(), scheduler_.running().end());
  for (Sequence* seq : all) {
    // Without a sink (tests, benches) there is no router to take it.
    if (seq->generated() > 0 || seq->sink == nullptr) continue;
    if (seq->state == SequenceState::kAwaitingKv && awaiting_kv_end_) {
      awaiting_kv_end_(seq, AwaitingKvEnd::kHandBack);  // The coordinator stops its transfer.
      continue;
    }
    HandBackSequence(seq);
  }
}

void EngineLoop::HandBackSequence(Sequence* seq) {
  PDS_LOG(INFO) << seq->request_id << ": handed back to the router (leaving the decode role)";
  metrics_->requests_handed_back.Increment();
  seq->sink->HandBack(
      "the decode worker is leaving the decode role and handed the request back before its "
      "first token; place it elsewhere");
  scheduler_.Finish(seq);
}

void EngineLoop::RetireStalled() {
  const absl::Time now = clock_->Now();
  // Waiting ones too: one preempted while paused waits until its client reads again.
  std::vector<Sequence*> held = scheduler_.waiting();
  held.insert(held.end(), scheduler_.running().begin(), scheduler_.running().end());
  for (Sequence* seq : held) {
    if (seq->state == SequenceState::kAwaitingKv) continue;
    // One waiting that never ran has sent nothing, so it cannot be paused.
    if (seq->state == SequenceState::kWaiting && seq->generated() == 0) continue;
    if (!scheduler_.IsPaused(seq)) {
      seq->paused_since = absl::Time();
      continue;
    }
    if (seq->paused_since == absl::Time()) {
      seq->paused_since = now;
    } else if (now - seq->paused_since >= config_.max_client_stall) {
      PDS_LOG(WARNING) << seq->request_id << ": client read nothing for "
                       << absl::FormatDuration(now - seq->paused_since)
                       << "; ending the request to free its KV blocks";
      metrics_->stalled_clients.Increment();
      FinishSequence(
          seq, text::FinishReason::kError,
          absl::StrCat("the client read no tokens for ",
                       absl::FormatDuration(config_.max_client_stall),
                       " (--max_client_stall); the request was ended to free its KV cache"));
    }
  }
}

void EngineLoop::RunStep(const StepPlan& plan) {
  const absl::Time start = clock_->Now();
  PackStep(plan, &batch_);
  for (const PlannedChunk& c : plan.chunks) {
    if (c.seq->admitted == absl::Time()) {
      c.seq->admitted = clock_->Now();
      metrics_->request_queue_time.Observe(absl::ToDoubleSeconds(c.seq->admitted - c.seq->arrival));
    }
  }
  sample_rows_.clear();
  for (const PlannedChunk& c : plan.chunks) {
    if (c.want_logits) {
      sample_rows_.push_back({&c.seq->sampling, static_cast<uint64_t>(c.start + c.num_tokens)});
    }
  }
  const absl::Time forward_start = clock_->Now();
  const absl::Status status = engine::ForwardAndSample(*model_, batch_, *pool_, {}, sample_rows_,
                                                       &logits_, &sampler_scratch_);
  const absl::Time forward_end = clock_->Now();
  if (!status.ok()) {
    PDS_LOG(ERROR) << "engine step failed: " << status;
    for (const PlannedChunk& c : plan.chunks) {
      if (c.seq->state != SequenceState::kFinished)
        FinishSequence(c.seq, text::FinishReason::kError, std::string(status.message()));
    }
    return;
  }
  scheduler_.ApplyStep(plan, logits_.sampled);
  for (const PlannedChunk& c : plan.chunks) {
    if (c.want_logits) EmitToken(c.seq);  // May finish and free the sequence.
  }
  const absl::Time end = clock_->Now();
  StepObservation sample = ObserveStep(plan);
  sample.duration_ms = Ms(end - start);
  sample.host_ms = Ms((forward_start - start) + (end - forward_end));
  (plan.num_prefill_tokens > 0 ? metrics_->step_duration_mixed
                               : metrics_->step_duration_decode_only)
      .Observe(sample.duration_ms / 1e3);
  metrics_->step_batch_sequences.Observe(static_cast<double>(plan.chunks.size()));
  metrics_->step_batch_tokens.Observe(plan.num_decode + plan.num_prefill_tokens);
  metrics_->step_host_overhead.Observe(sample.host_ms / 1e3);
  absl::MutexLock lock(&mu_);
  steps_.Add(sample);
}

void EngineLoop::Run() {
  while (true) {
    std::vector<Incoming> inbox;
    std::vector<std::function<void()>> posted;
    bool stop;
    bool hand_back;
    {
      absl::MutexLock lock(&mu_);
      inbox.swap(inbox_);
      posted.swap(posted_);
      wake_ = false;
      stop = stop_;
      hand_back = hand_back_;
    }
    for (Incoming& in : inbox) {
      Sequence* raw = in.seq.get();
      scheduler_.Add(std::move(in.seq));
      if (in.on_added) in.on_added(raw);
    }
    for (auto& fn : posted) fn();
    if (stop) break;
    const bool hook_pending = iteration_hook_ && iteration_hook_();
    RetireCancelled();
    if (hand_back) HandBackUnstarted();
    RetireStalled();
    const StepPlan plan = scheduler_.PlanStep();
    HandOverTransferAdmissions(plan);
    if (!plan.empty()) RunStep(plan);
    PublishStats();
    if (plan.empty()) {
      const bool holds_none =
          !hook_pending && scheduler_.num_waiting() == 0 && scheduler_.running().empty();
      absl::MutexLock lock(&mu_);
      auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return wake_ || stop_; };
      mu_.AwaitWithTimeout(absl::Condition(&woken), holds_none ? kEmptyWait : kIdleWait);
    }
  }
  // Whatever is left when the loop stops ends with an error the client can retry.
  std::vector<Sequence*> left = scheduler_.waiting();
  left.insert(left.end(), scheduler_.running().begin(), scheduler_.running().end());
  for (Sequence* seq : left)
    FinishSequence(seq, text::FinishReason::kError, "decode worker stopped");
  PublishStats();
}

}  // namespace pdserve::decode
