// A prefill worker in virtual time: its queue, in the product's order (earliest due first:
// prefill::InsertByDue), packed into forwards by the product's rule
// (prefill::BatchPacker), each forward timed by the calibration's prefill fit over the batch's
// prompts, and each job's KV shipped over the worker's link, layer by layer while the next
// layer computes (or in bulk after the forward), as the real batcher does. The batch ends when
// its last transfer has landed.
// Thread-safety: not thread-safe; the simulator's one thread owns it.
#ifndef PDSERVE_SIM_SIM_PREFILL_WORKER_H_
#define PDSERVE_SIM_SIM_PREFILL_WORKER_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "common/worker_reports.h"
#include "router/worker_info.h"
#include "sim/sim_profile.h"

namespace pdserve::sim {

struct SimPrefillJob {
  int request = 0;
  int prompt_tokens = 0;    // Computed (the whole prompt: the prefill worker has no cache).
  int transfer_tokens = 0;  // Shipped (the decode worker's uncached suffix).
  double arrival_ms = 0;
  // When it is due (its TTFT objective's deadline, else the call's): the queue's order, as
  // the real prefill worker's (PrefillRequest.ttft_due_in_ms).
  double due_ms = 0;
};

struct SimPrefillDone {
  SimPrefillJob job;
  double queue_ms = 0;
  double compute_ms = 0;  // The batch's forward.
  // What the batch computed, as the real prefill worker reports it (PrefillMeasurement).
  int64_t batch_tokens = 0;
  double batch_token_squares = 0;
  double transfer_tail_ms = 0;  // From the forward's end to the last byte landing.
  double transfer_bytes = 0;
};

// The measurements a real decode worker reports of a completed offload (what the router
// learns from: router/learning.h), for a simulated one.
PrefillOutcome PrefillOutcomeOf(const SimPrefillDone& done, uint64_t model_fingerprint);

struct LinkModel {
  double bytes_per_ms = 1e6;
  double latency_ms = 0;
  bool layerwise = true;
};

// When a batch's last KV byte lands, `compute_ms` after it started computing and shipping
// `bytes` over `layers` layers: layer-wise, layer i ships once computed and once layer i-1 has
// shipped, so the end is the later of (the first layer, then every layer back to back) and
// (the whole forward, then the last layer); in bulk, the forward then every layer.
double TransferEndMs(double compute_ms, double bytes, int layers, const LinkModel& link);

class SimPrefillWorker {
 public:
  SimPrefillWorker(const WorkerShape& shape, const CostModelParams& timing, const LinkModel& link);

  void Submit(const SimPrefillJob& job);
  // Drops request `request`'s job, queued or computing (its decode worker cancelled it to
  // hand the request back to the router); false when it is not here (its KV has landed).
  bool Withdraw(int request);
  // Starts the next forward if none runs: returns its length (to its last transfer landing),
  // or a negative value when idle or the queue is empty.
  double StartBatch(double now_ms);
  // The running batch ended: its jobs.
  std::vector<SimPrefillDone> FinishBatch();
  bool busy() const { return busy_; }
  // Nothing computing, nothing queued (a role change may take the worker).
  bool idle() const { return !busy_ && queue_.empty(); }
  LoadSnapshot Load() const;

 private:
  const WorkerShape shape_;
  const CostModelParams timing_;
  const LinkModel link_;
  std::deque<SimPrefillJob> queue_;
  int64_t queued_tokens_ = 0;
  bool busy_ = false;
  std::vector<SimPrefillDone> running_;
  int64_t running_tokens_ = 0;
  // LoadSnapshot::pending_prefill_token_squares: the queue's and the running batch's.
  double queued_token_squares_ = 0;
  double running_token_squares_ = 0;
  double running_compute_ms_ = 0;
  double tokens_per_second_ = 0;
};

}  // namespace pdserve::sim

#endif  // PDSERVE_SIM_SIM_PREFILL_WORKER_H_
