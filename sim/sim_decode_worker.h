// A decode worker in virtual time: the product's scheduler (decode::Scheduler, plan/apply)
// and block allocator (kvcache::BlockManager, with its prefix cache) without a model. A step's
// plan is what the real engine loop would run; its duration is the simulator's to decide (the
// calibration), and its sampled tokens are SimToken()s, so that follow-up turns hit the
// prefix cache exactly as they would.
// Thread-safety: not thread-safe; the simulator's one thread owns it.
#ifndef PDSERVE_SIM_SIM_DECODE_WORKER_H_
#define PDSERVE_SIM_SIM_DECODE_WORKER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "decode_worker/scheduler.h"
#include "kvcache/block_manager.h"
#include "router/worker_info.h"
#include "sim/sim_profile.h"

namespace pdserve::sim {

// The token a simulated request generates at output index `index`.
int32_t SimToken(int request, int index, int vocab_size);

// A token given to a request's client.
struct Emission {
  int request = 0;
  bool first = false;     // Its first token.
  bool finished = false;  // Its last: the sequence is gone.
};

class SimDecodeWorker {
 public:
  SimDecodeWorker(const WorkerShape& shape, uint64_t model_fingerprint);

  // A request's sequence joins the waiting queue.
  decode::Sequence* Submit(int request, const std::vector<int32_t>& prompt, int max_tokens);
  // Offload, as the offload coordinator's OnAdded: Scheduler::AdmitOrAwaitTransfer, and once
  // the sequence is admitted AWAITING_KV (now, or after waiting for blocks) its prompt's
  // blocks are reserved for the transfer and `start` is called with the prefix-cache hit the
  // transfer skips. kAwaitingKvFull: it stays waiting and prefills locally.
  decode::Scheduler::TransferAdmission AdmitOrAwaitTransfer(decode::Sequence* seq,
                                                            std::function<void(int)> start);
  // The requests it holds that have given their client nothing yet (waiting, prefilling
  // locally, or awaiting offloaded KV), in request order: what a worker switching role hands
  // back to the router (decode::EngineLoop::BeginDrainHandingBack).
  std::vector<int> Unstarted() const;
  // Drops request `seq`, which has given its client nothing, releasing its blocks (those
  // reserved for a transfer too: the caller has withdrawn the transfer). Between steps only.
  void HandBack(decode::Sequence* seq);
  // The offloaded KV and the first token arrived (the coordinator's Complete).
  void KvArrived(decode::Sequence* seq, std::vector<Emission>* out);

  // Plans the next step when none is running (handing over the offloads it admitted for
  // their transfers first); false when there is nothing to run.
  // `step` is what the worker reports.
  bool StartStep(StepObservation* step);
  // The running step's forward pass took `duration_ms`: applies it and retires finished
  // sequences.
  void FinishStep(double duration_ms, std::vector<Emission>* out);
  bool busy() const { return busy_; }

  // The load report the real worker sends (steps since the previous one) and its
  // prefix-cache events.
  WorkerReport TakeReport();
  router::PrefixCacheUpdate TakePrefixEvents();

  const decode::SchedulerCounters& counters() const { return scheduler_.counters(); }
  kvcache::BlockCounts block_counts() const { return blocks_.counts(); }
  int live_sequences() const { return static_cast<int>(meta_.size()); }
  // No sequence and no block held: a role change may take the worker.
  bool empty() const {
    const kvcache::BlockCounts b = blocks_.counts();
    return meta_.empty() && b.in_use == 0 && b.reserved == 0 && b.quarantined == 0;
  }
  // Frees the prefix cache (the pool will hold another role's KV).
  int DropCache() { return blocks_.DropCache(); }

 private:
  struct Meta {
    int request = 0;
    int max_tokens = 0;
    std::vector<int32_t> reserved;  // Blocks held for an incoming transfer.
  };
  // The sequence's newest token reached its client.
  void Emit(decode::Sequence* seq, std::vector<Emission>* out);

  const WorkerShape shape_;
  kvcache::BlockManager blocks_;
  decode::Scheduler scheduler_;
  absl::flat_hash_map<const decode::Sequence*, Meta> meta_;
  uint64_t next_order_ = 0;
  bool busy_ = false;
  decode::StepPlan plan_;
  std::vector<int32_t> sampled_;
  StepHistory steps_;  // Since the last report (the engine loop's cap).
  StepObservation step_;
};

}  // namespace pdserve::sim

#endif  // PDSERVE_SIM_SIM_DECODE_WORKER_H_
