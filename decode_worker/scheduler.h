// The decode worker's continuous-batching scheduler, plan then apply (llama.cpp's
// init_batch/apply, TensorRT-LLM's side-effect-free capacity scheduler):
//   PlanStep()  decides the next engine step: every running decode (one token each), then
//               prefill chunks up to the token budget (--max-num-batched-tokens; chunked
//               prefill co-batched with decode as vLLM and Sarathi do), block-table growth,
//               preemptions when blocks run out (the lowest-priority, newest running
//               sequence is freed and requeued for recompute; a paused one, whose client
//               reads nothing, goes first), and admissions from the
//               waiting queue when blocks for the uncached prompt + 1 token are available
//               after prefix-cache reuse: highest priority first, and within it client by
//               client (the earliest request of the client running the fewest), so that one
//               client's backlog does not hold back another's requests; when slots or blocks
//               are short, a client running at least two more sequences than the one waiting
//               gives up its newest (fair-share preemption). Clients are as the router named
//               them (Sequence::client); without names every request is one client's.
//               A sequence preempted while its client reads nothing is not admitted again
//               until it reads.
//   ApplyStep() records what the forward pass computed: KV positions, full blocks entering
//               the prefix cache, sampled tokens.
// A StepPlan is a plain value, so plans are testable without a model.
// Thread-safety: not thread-safe; owned by the scheduler loop.
#ifndef PDSERVE_DECODE_WORKER_SCHEDULER_H_
#define PDSERVE_DECODE_WORKER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "decode_worker/sequence.h"
#include "kvcache/block_manager.h"

namespace pdserve::decode {

struct SchedulerConfig {
  // Tokens per KV block. Default 16.
  int block_size = 16;
  // Token budget of one engine step (decodes count one each). Default 512.
  int max_num_batched_tokens = 512;
  // Sequences stepped together at most (the decode batch's width); new sequences are
  // admitted only below it. Default 256.
  int max_num_seqs = 256;
  // Sequences awaiting a prefill worker's KV (AWAITING_KV) at most. They hold KV blocks but no
  // place in the batch, so max_num_seqs does not count them (as vLLM's requests waiting for
  // remote KV do not count in its running batch): counted there, offloads queued at busy prefill
  // workers filled a worker's 256 places, and the offloads behind them fell back to local
  // prefill and broke TPOT (pdserve-sim, Azure conversation trace at 8 GPUs: 3,493 fallbacks
  // in 10 minutes). Default 1024.
  int max_awaiting_kv = 1024;
  // Waiting sequences at most; beyond it a submission fails with RESOURCE_EXHAUSTED. Enforced
  // in one place, where sequences are submitted (EngineLoop::Submit counts those not yet in
  // the scheduler too). Default 1024.
  int max_waiting = 1024;
  // The retry-after hint given with that RESOURCE_EXHAUSTED. Default 200 ms.
  absl::Duration retry_after = absl::Milliseconds(200);
  // Reuse cached full blocks across requests. Default true.
  bool enable_prefix_caching = true;
  // Pending unsent tokens beyond which a sequence is paused. Default 256.
  int max_pending_tokens = 256;
  // A sequence paused this long (its client reads nothing) is ended with an error so that
  // its KV blocks and batch slot go to others; enforced by the engine loop. Default 30 s.
  absl::Duration max_client_stall = absl::Seconds(30);
  // The model fingerprint the block hashes are keyed with.
  uint64_t model_fingerprint = 0;

  absl::Status Validate() const;
};

struct PlannedChunk {
  Sequence* seq = nullptr;
  int start = 0;             // First position computed.
  int num_tokens = 0;        // Tokens computed.
  bool want_logits = false;  // The chunk reaches the end of the sequence: sample after it.
  bool decode = false;       // A single-token decode step.
  // Attention work (the cost model's input): token i of the chunk attends to start + i + 1
  // positions.
  int64_t attention_positions() const {
    return static_cast<int64_t>(num_tokens) * start +
           static_cast<int64_t>(num_tokens) * (num_tokens + 1) / 2;
  }
};

struct StepPlan {
  std::vector<PlannedChunk> chunks;
  std::vector<Sequence*> admitted;
  // Waiting offloads (Sequence::on_admitted_for_transfer) admitted AWAITING_KV by this plan:
  // their blocks are allocated; HandOverTransferAdmissions starts their transfers.
  std::vector<Sequence*> admitted_for_transfer;
  std::vector<Sequence*> preempted;
  int num_decode = 0;
  int num_prefill_tokens = 0;
  int blocks_allocated = 0;
  bool empty() const { return chunks.empty(); }
};

// Calls each of `plan`'s admitted_for_transfer sequences' on_admitted_for_transfer (once; it
// is cleared first). The engine loop and the simulator call it after PlanStep.
void HandOverTransferAdmissions(const StepPlan& plan);

// LoadSnapshot::pending_prefill_tokens and pending_prefill_token_squares.
struct PendingPrefill {
  int64_t tokens = 0;
  double token_squares = 0;
};

struct SchedulerCounters {
  uint64_t preemptions = 0;
  uint64_t fairness_preemptions = 0;  // Of those, to let another client's request in.
  uint64_t prefix_queried_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  uint64_t steps = 0;
  uint64_t mixed_steps = 0;
  uint64_t prefill_tokens = 0;
  uint64_t decode_tokens = 0;
  uint64_t prefill_chunks = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, kvcache::BlockManager* blocks);
  ~Scheduler();

  // Queues a sequence (state kWaiting). The queue's bound is the submitter's (max_waiting).
  void Add(std::unique_ptr<Sequence> seq);
  StepPlan PlanStep();
  // `sampled[i]` is the token for the i-th chunk of `plan` with want_logits.
  void ApplyStep(const StepPlan& plan, absl::Span<const int32_t> sampled);
  // Removes a finished (or cancelled) sequence, releasing its blocks; returns ownership.
  std::unique_ptr<Sequence> Finish(Sequence* seq);

  // Offload (AWAITING_KV): admits `seq` from the waiting queue with its prompt blocks
  // allocated; the caller then reserves them for a transfer. Returns false if blocks are short
  // or max_awaiting_kv sequences already await KV. `seq` must be waiting.
  bool AdmitForTransfer(Sequence* seq);
  // How an offload arriving at this worker is admitted (AdmitOrAwaitTransfer).
  enum class TransferAdmission {
    kAdmitted,          // AWAITING_KV now, its blocks allocated.
    kWaitingForBlocks,  // Too few free blocks: it waits for them as an offload.
    kAwaitingKvFull,    // max_awaiting_kv offloads await KV: it stays waiting, a local prefill.
  };
  // Offload: AdmitForTransfer if blocks allow; else, unless max_awaiting_kv offloads already
  // await KV, `seq` waits for blocks as an offload: PlanStep admits it AWAITING_KV when they
  // free (never in local chunks) and HandOverTransferAdmissions calls `on_admitted` once. A
  // local prefill needs the same blocks, so it waits no longer. `seq` must be waiting.
  TransferAdmission AdmitOrAwaitTransfer(Sequence* seq, std::function<void(Sequence*)> on_admitted);
  // The sequence (AWAITING_KV) joins the running batch with `computed_tokens` positions in
  // its KV: the whole prompt when the transfer delivered it (the first token is appended by
  // the caller), or the cached prefix when its prefill falls back to local chunks. With
  // max_num_seqs sequences running already it joins anyway (its blocks are written); a plan
  // steps max_num_seqs of them at most, in priority then arrival order, and nothing new is
  // admitted until they are fewer.
  void TransferDone(Sequence* seq, int computed_tokens);
  // Frees a running or AWAITING_KV sequence's blocks and puts it back in the waiting queue
  // (it is admitted again, and recomputed, like a preempted one).
  void ReturnToWaiting(Sequence* seq);

  // Its client is behind: the sequence is not stepped (and is the first to be preempted).
  bool IsPaused(const Sequence* seq) const;
  const std::vector<Sequence*>& running() const { return running_; }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const;
  int num_awaiting_kv() const;
  // max_awaiting_kv sequences await KV: AdmitForTransfer refuses more.
  bool awaiting_kv_full() const { return num_awaiting_kv() >= config_.max_awaiting_kv; }
  // Prompt tokens of waiting and running sequences not computed yet (local prefill backlog)
  // and their attention work, in one walk over the sequences.
  PendingPrefill pending_prefill() const;
  // Tokens (prompt and generated) of every sequence it holds: waiting, running, awaiting KV.
  int64_t context_tokens() const;
  std::vector<Sequence*> waiting() const;
  const SchedulerCounters& counters() const { return counters_; }
  const SchedulerConfig& config() const { return config_; }
  kvcache::BlockManager* blocks() { return blocks_; }

 private:
  struct WaitingOrder {
    bool operator()(const Sequence* a, const Sequence* b) const {
      return a->priority != b->priority ? a->priority > b->priority : a->order < b->order;
    }
  };
  // The one admission path (local and offloaded): moves `seq` from waiting to running in
  // `state` with blocks for its prompt + 1 token after prefix-cache reuse, or returns false
  // and changes nothing when blocks or sequence slots are short. `plan` may be null.
  bool Admit(Sequence* seq, SequenceState state, StepPlan* plan);
  // Admit() for a local prefill, plus its first chunk within `token_budget`.
  bool TryAdmit(Sequence* seq, int token_budget, StepPlan* plan);
  // Makes room for `needed` more blocks by preempting running sequences other than the
  // ones already planned; returns false if `seq` itself had to be preempted.
  bool EnsureBlocks(Sequence* seq, int needed, StepPlan* plan);
  void Preempt(Sequence* seq, StepPlan* plan);
  void PublishFullBlocks(Sequence* seq);
  // The waiting sequence to admit next (see the header comment), or null when every waiting
  // one is paused (its client reads nothing).
  Sequence* NextToAdmit() const;
  // `seq` cannot be admitted: if another client runs at least two more sequences than
  // `seq`'s, preempts that client's newest running one (of no higher priority) and returns
  // true. So one client's long streams cannot hold every slot while another's requests wait.
  bool PreemptForFairness(Sequence* seq, StepPlan* plan);
  absl::flat_hash_map<absl::string_view, int> RunningByClient() const;
  int BlocksFor(int tokens) const { return (tokens + config_.block_size - 1) / config_.block_size; }

  SchedulerConfig config_;
  kvcache::BlockManager* blocks_;
  std::set<Sequence*, WaitingOrder> waiting_;
  std::vector<Sequence*> running_;  // Includes AWAITING_KV sequences.
  absl::flat_hash_map<Sequence*, std::unique_ptr<Sequence>> owned_;
  SchedulerCounters counters_;
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_SCHEDULER_H_
