// The prefill worker's batcher: queued prefill jobs are packed, up to a token budget, into
// one engine forward over their whole prompts (in this worker's own KV pool). The layer hook
// hands each finished layer's K/V for every job's target blocks to the KV transport while the
// next layer computes; after the last layer each transfer is completed and the first token
// sampled. A cancelled job stops between layers: its transfer is aborted (no write can land
// afterwards) and its waiters are told it stopped writing.
// Thread-safety: Submit/Cancel from any thread; one batching thread does the work.
#ifndef PDSERVE_PREFILL_WORKER_PREFILL_BATCHER_H_
#define PDSERVE_PREFILL_WORKER_PREFILL_BATCHER_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/worker_reports.h"
#include "engine/model.h"
#include "kvcache/block_manager.h"
#include "kvtransfer/kv_transport.h"
#include "prefill_worker/prefill_metrics.h"
#include "text/sampling_config.h"

namespace pdserve::prefill {

struct PrefillJobResult {
  absl::Status status;
  int32_t first_token = -1;
  PrefillMeasurement measured;
};

struct PrefillJob {
  std::string request_id;
  std::vector<int32_t> prompt;
  text::SamplingConfig sampling;
  kvtransfer::TransferTarget target;
  int first_position = 0;  // First position written (block aligned).
  absl::Time arrival;
  absl::Time deadline = absl::InfiniteFuture();
  // When the request's TTFT objective falls due (its deadline when it has none): the queue's
  // order (prefill_worker/queue_order.h).
  absl::Time due = absl::InfiniteFuture();
  std::function<void(const PrefillJobResult&)> done;  // Called exactly once.
};

struct PrefillBatcherConfig {
  // Prompt tokens per forward (several requests share a forward up to it). Default 8192.
  int max_batch_tokens = 8192;
  // "layerwise" ships each layer as soon as it is computed; "bulk" ships every layer after the
  // whole forward (the baseline of the transfer benchmark). Default "layerwise".
  std::string transfer_mode = "layerwise";
  // Bound on completing a transfer after the last layer. Default 30 s.
  absl::Duration finish_timeout = absl::Seconds(30);
  // Test hook: pause after each layer (to kill or cancel a worker mid-transfer).
  absl::Duration layer_delay = absl::ZeroDuration();
  absl::Status Validate() const;
};

class PrefillBatcher {
 public:
  // `transport_pool` is the memory `transport` registered: `pool`'s own, or, through a staging
  // transport (a pool in device memory), its staging memory (staging_transport.h).
  PrefillBatcher(engine::Model* model, kvcache::KvPool* pool, kvtransfer::KvTransport* transport,
                 kvtransfer::LocalPool* transport_pool, const PrefillBatcherConfig& config,
                 PrefillMetrics* metrics);
  ~PrefillBatcher();
  void Start();
  void Stop();

  // Queues a job. FAILED_PRECONDITION when the target's layout or model differs from this
  // worker's (nothing is computed or written), RESOURCE_EXHAUSTED when the prompt cannot
  // fit this worker's pool.
  absl::Status Submit(std::unique_ptr<PrefillJob> job);
  // Stops the job with this transfer token; `stopped` is called (on this thread or the batch
  // thread, between layers) once it can write no more, with the state it was in: "unknown",
  // "queued", "computing", "done". Never called while a write of the job can still land.
  void Cancel(uint64_t transfer_token, std::function<void(const std::string& state)> stopped);
  // Asks the job to stop between layers without waiting (the caller's RPC went away).
  void RequestCancel(uint64_t transfer_token);

  // Refuse new jobs (SIGTERM, a role change); queued and running ones finish.
  void BeginDrain();
  // Take new jobs again (a role change back, or one given up).
  void EndDrain();
  bool draining() const;
  // No job queued or computing.
  bool idle() const;

  // Tokens queued or computing, and the sum of their prompts' token counts squared (the
  // backlog's attention work, which the router's cost model prices; LoadSnapshot).
  int64_t pending_tokens() const;
  double pending_token_squares() const;
  int running() const;
  // Recent prefill throughput (tokens/s) and transfer bandwidth (bytes/s).
  double tokens_per_second() const;
  double transfer_bytes_per_second() const;

 private:
  struct Active;
  struct Entry;
  void Run();
  // One batch: open (transfers, blocks), forward with each layer written as it is in the pool,
  // finish each job's transfer, answer each job.
  void RunBatch(std::vector<std::unique_ptr<PrefillJob>> jobs);
  // The batch's jobs with their transfers opened and blocks allocated (`computing`), or the
  // error that keeps each one out.
  std::vector<Entry> OpenBatch(std::vector<std::unique_ptr<PrefillJob>> jobs,
                               absl::Time batch_start);
  // Writes `layer` of every job still writing (a cancelled or late one stops here); returns
  // how many still write.
  int WriteLayer(std::vector<Entry>& entries, int layer);
  // After the forward: finishes a computed job's transfer and fills its result (`row` is its
  // row in the batch's logits).
  void FinishEntry(Entry& e, int row, const absl::Status& forward, absl::Time forward_end,
                   const engine::Logits& logits);
  // The queue and the measured throughputs, once a batch is done.
  void UpdateRates(const std::vector<Entry>& entries, double compute_ms, int batch_tokens,
                   uint64_t batch_bytes, double transfer_seconds);
  // The job's transfer (counts a full staging pool).
  absl::StatusOr<std::unique_ptr<kvtransfer::OutboundTransfer>> OpenTransfer(const PrefillJob& job);

  engine::Model* model_;
  kvcache::KvPool* pool_;
  kvtransfer::KvTransport* transport_;
  kvtransfer::LocalPool* transport_pool_;
  PrefillBatcherConfig config_;
  PrefillMetrics* metrics_;
  kvcache::BlockManager blocks_;  // Batch thread only.
  std::thread thread_;

  // A prompt of `tokens` joins (+1) or leaves (-1) the backlog.
  void CountPendingLocked(size_t tokens, int sign) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<PrefillJob>> queue_ ABSL_GUARDED_BY(mu_);
  // Jobs being computed, by transfer token: cancellation flags and stop acknowledgements.
  absl::flat_hash_map<uint64_t, std::shared_ptr<Active>> active_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int64_t pending_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  double pending_token_squares_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  double tokens_per_second_ ABSL_GUARDED_BY(mu_) = 0;
  double bytes_per_second_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pdserve::prefill

#endif  // PDSERVE_PREFILL_WORKER_PREFILL_BATCHER_H_
