// The decode worker's one scheduling thread: takes new sequences and events, retires
// cancelled ones, plans a step, runs one engine forward over the packed batch, samples,
// streams tokens to each sequence's sink, and retires finished sequences. Everything it
// touches (scheduler, block manager, sequences, model) belongs to this thread; other threads
// talk to it through Submit/Post/Notify and read published snapshots.
// Thread-safety: public methods are safe from any thread.
#ifndef PDSERVE_DECODE_WORKER_ENGINE_LOOP_H_
#define PDSERVE_DECODE_WORKER_ENGINE_LOOP_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/worker_reports.h"
#include "decode_worker/decode_metrics.h"
#include "decode_worker/scheduler.h"
#include "engine/model.h"
#include "kvcache/block_manager.h"
#include "text/tokenizer.h"

namespace pdserve::decode {

struct WorkerStats {
  LoadSnapshot load;  // As the registry reports it (step_report.h).
  kvcache::BlockCounts blocks;
  int running = 0;
  int waiting = 0;
  int awaiting_kv = 0;
  int64_t pending_prefill_tokens = 0;
  SchedulerCounters counters;
  uint64_t requests_finished = 0;
  uint64_t offload_fallbacks = 0;
  uint64_t offload_completions = 0;
};

class EngineLoop {
 public:
  EngineLoop(engine::Model* model, kvcache::KvPool* pool, std::vector<int32_t> eos_token_ids,
             const SchedulerConfig& config, DecodeMetrics* metrics, Clock* clock);
  ~EngineLoop();

  void Start();
  // Stops the thread; sequences still present finish with an error.
  void Stop();

  // Queues a sequence. RESOURCE_EXHAUSTED when the waiting queue is full, UNAVAILABLE while
  // draining. `on_added`, if set, runs on the loop thread right after the sequence joined the
  // waiting queue and before the next plan (the offload path admits it there).
  absl::Status Submit(std::unique_ptr<Sequence> seq,
                      std::function<void(Sequence*)> on_added = nullptr);
  // Runs `fn` on the loop thread before the next step (offload events, tests).
  void Post(std::function<void()> fn);
  // Something outside changed (a client cancelled or caught up): re-plan soon.
  void Notify();
  // Refuse new sequences from now on.
  void BeginDrain();
  // Draining to leave the decode role: from now until EndDrain, between steps, every sequence
  // that has given its client nothing (waiting, prefilling locally, awaiting offloaded KV) is
  // handed back to the router (StreamSink::HandBack), which places it elsewhere; the drain
  // then waits only for the streams that have started. Refuses new sequences too.
  void BeginDrainHandingBack();
  // Take new sequences again (a role change that was given up).
  void EndDrain();
  bool draining() const;
  // Frees every cached prefix block no sequence holds (reported as evictions), on the loop
  // thread; returns how many once done. Before the pool's memory serves another role.
  int DropPrefixCache();
  // Waits until no sequence is waiting or running, or `deadline`.
  bool WaitUntilIdle(absl::Time deadline);

  WorkerStats Stats() const;
  // Step samples since the last call, prefix-cache events since the last call, and whether
  // they are a full resync (`reset`: `events.stored` is then every cached hash). Call with
  // request_reset after (re)connecting to the router; the full list follows within a step.
  void TakeReport(bool request_reset, std::vector<StepObservation>* steps,
                  kvcache::PrefixCacheEvents* events, bool* reset);

  // Loop-thread only (offload coordinator, tests).
  Scheduler& scheduler() { return scheduler_; }
  engine::Model* model() { return model_; }
  const SchedulerConfig& config() const { return config_; }
  // Finishes a sequence: final message, metrics, blocks released.
  void FinishSequence(Sequence* seq, text::FinishReason reason, const std::string& error = "");
  // Emits one generated token (the last of seq->tokens) and finishes the sequence if it is
  // done. Returns false if it finished.
  bool EmitToken(Sequence* seq);
  // Ends a sequence that has given its client nothing: the router places it again (see
  // BeginDrainHandingBack); its blocks are released.
  void HandBackSequence(Sequence* seq);
  // Offload hooks: ending an AWAITING_KV sequence is the coordinator's (its transfer must stop
  // first), for its client's cancellation and for a hand-back.
  enum class AwaitingKvEnd { kCancelled, kHandBack };
  void SetAwaitingKvEndHandler(std::function<void(Sequence*, AwaitingKvEnd)> handler);
  // Runs on the loop thread once per iteration (the offload coordinator's timers); returns
  // whether it has timed work pending (the loop then keeps looking every 20 ms even when it
  // holds no sequence). Set before Start().
  void SetIterationHook(std::function<bool()> hook);
  // Any thread.
  void CountOffload(bool completed, const std::string& fallback_cause);
  // How long a sequence awaited offloaded KV, whether it arrived or the sequence fell back.
  void ObserveKvWait(absl::Duration waited);

 private:
  void Run();
  void RunStep(const StepPlan& plan);
  void RetireCancelled();
  // Hands back the sequences that have given their clients nothing (while hand_back_, read
  // with the inbox).
  void HandBackUnstarted();
  // Ends sequences paused longer than max_client_stall (their clients read nothing).
  void RetireStalled();
  void PublishStats();

  engine::Model* model_;
  kvcache::KvPool* pool_;
  std::vector<int32_t> eos_;
  SchedulerConfig config_;
  DecodeMetrics* metrics_;
  Clock* clock_;
  kvcache::BlockManager blocks_;
  Scheduler scheduler_;
  std::function<void(Sequence*, AwaitingKvEnd)> awaiting_kv_end_;
  std::function<bool()> iteration_hook_;

  // Loop-thread scratch, reused every step.
  engine::PackedBatch batch_;
  engine::Logits logits_;
  engine::SamplerScratch sampler_scratch_;
  std::vector<engine::RowSampling> sample_rows_;  // The step's logits rows, in batch order.
  SchedulerCounters published_counters_;

  std::thread thread_;
  mutable absl::Mutex mu_;
  struct Incoming {
    std::unique_ptr<Sequence> seq;
    std::function<void(Sequence*)> on_added;
  };
  std::vector<Incoming> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> posted_ ABSL_GUARDED_BY(mu_);
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool hand_back_ ABSL_GUARDED_BY(mu_) = false;  // BeginDrainHandingBack until EndDrain.
  WorkerStats stats_ ABSL_GUARDED_BY(mu_);
  StepHistory steps_ ABSL_GUARDED_BY(mu_);  // Since the last report.
  kvcache::PrefixCacheEvents events_ ABSL_GUARDED_BY(mu_);
  bool reset_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool reset_ready_ ABSL_GUARDED_BY(mu_) = false;
  bool reporting_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t requests_finished_ = 0;              // Loop thread.
  std::atomic<uint64_t> offload_fallbacks_{0};  // Any thread.
  std::atomic<uint64_t> offload_completions_{0};
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_ENGINE_LOOP_H_
