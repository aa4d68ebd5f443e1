// One request on a decode worker, from admission to its last token.
// tokens = prompt followed by generated tokens; num_computed of them have their KV in the
// cache. Every step computes the tokens [num_computed, tokens.size()): a prefill chunk, a
// recompute after preemption, or (when one token is missing) a decode.
// Thread-safety: owned by the scheduler loop; only StreamSink is shared with gRPC threads.
#ifndef PDSERVE_DECODE_WORKER_SEQUENCE_H_
#define PDSERVE_DECODE_WORKER_SEQUENCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "decode_worker/stream_sink.h"
#include "text/generation_stream.h"
#include "text/sampling_config.h"

namespace pdserve::decode {

enum class SequenceState { kWaiting, kRunning, kAwaitingKv, kFinished };

// How an offloaded prefill went (reported in the final message's placement and timings).
struct OffloadOutcome {
  bool offloaded = false;  // The prompt's KV came from a prefill worker.
  std::string prefill_worker_id;
  PrefillMeasurement prefill;  // The prefill worker's, when offloaded.
  bool fell_back_to_local = false;
  std::string fallback_cause;
  // Fell back: how long the offload held the request before the decode worker gave up on it,
  // and when it did (its local prefill's time counts from then, or from a later admission).
  double offload_wait_ms = 0;
  absl::Time fell_back_at;
};

struct Sequence {
  uint64_t order = 0;  // Arrival order: earlier is smaller (the queue's tie-breaker).
  std::string request_id;
  // Who sent it, as the router named the client (DecodeRequest.client; empty: anonymous).
  std::string client;
  int priority = 0;
  absl::Time arrival;
  std::vector<int32_t> tokens;
  int prompt_len = 0;
  int num_computed = 0;
  int cached_prompt_tokens = 0;       // From the prefix cache at (first) admission.
  bool prefix_stats_counted = false;  // Its prompt entered the prefix-cache counters.
  std::vector<int32_t> block_table;
  std::vector<uint64_t> block_hashes;  // Hashes of the full blocks computed so far.
  SequenceState state = SequenceState::kWaiting;
  text::SamplingConfig sampling;
  std::unique_ptr<text::GenerationStream> stream;
  std::shared_ptr<StreamSink> sink;
  int preemptions = 0;
  int prefill_chunks = 0;
  // Timings (zero when not reached).
  absl::Time admitted;
  absl::Time prefill_done;
  absl::Time first_token;
  absl::Time last_token;
  absl::Time paused_since;  // Its client stopped reading (zero while it reads).
  // Offload (see offload_coordinator.h).
  OffloadOutcome offload;
  // Set (Scheduler::AdmitOrAwaitTransfer) on an offload that found too few free blocks for its
  // prompt when it arrived: it waits for them as an offload, not as a local prefill. The
  // scheduler admits it AWAITING_KV when the blocks are there (StepPlan::admitted_for_transfer)
  // and HandOverTransferAdmissions calls this once, to start its transfer. Dropped with the
  // sequence if it ends first.
  std::function<void(Sequence*)> on_admitted_for_transfer;

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int generated() const { return num_tokens() - prompt_len; }
  int uncomputed() const { return num_tokens() - num_computed; }
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_SEQUENCE_H_
