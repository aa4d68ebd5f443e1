// What workers tell routers, as domain values (no proto): who they are (their registration),
// each engine step a decode worker ran (the cost model's training data), its load (the
// placer's view), and what a finished offload measured. wire/report_bridge.h converts them to and
// from the wire once per side. pdserve-sim builds the same values with the same functions
// (decode_worker/step_report.h, router/learning.h), so that a policy measured in the simulator
// learns what the product learns.
// Thread-safety: value types; StepHistory is not synchronised (its owner locks it).
#ifndef PDSERVE_COMMON_WORKER_REPORTS_H_
#define PDSERVE_COMMON_WORKER_REPORTS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/kv_layout.h"

namespace pdserve {

enum class WorkerRole { kDecode, kPrefill };
absl::string_view RoleName(WorkerRole role);      // "decode" or "prefill".
inline constexpr size_t kMaxWorkerIdBytes = 128;  // A worker id's longest.

// A worker as it registers with routers: the worker process and its role fill it, the
// registry client sends it (wire/report_bridge.h converts), the router keeps it
// (router::WorkerInfo is this type).
struct WorkerRegistration {
  std::string worker_id;  // Unique and stable (e.g. the pod name).
  WorkerRole role = WorkerRole::kDecode;
  std::string grpc_address;     // host:port of its Decode or Prefill service.
  std::string metrics_address;  // host:port of its /metrics; empty when disabled.
  std::string model;            // The model name it serves.
  uint64_t model_fingerprint = 0;
  // Its KV pool (decode) or the KV it produces (prefill; num_blocks is its own pool's).
  KvLayout kv_layout;
  uint64_t epoch = 0;  // A restarted process registers with a new one.
  // Decode workers: the step token budget, running sequences and context they allow.
  int max_num_batched_tokens = 0;
  int max_num_seqs = 0;
  int max_context_tokens = 0;
  int vocab_size = 0;
  std::string architecture;
  bool role_switching = false;  // It can change role when told (--role_switching).

  bool is_decode() const { return role == WorkerRole::kDecode; }
  bool is_prefill() const { return role == WorkerRole::kPrefill; }
  // KV bytes of one token over all layers, K and V.
  int64_t kv_bytes_per_token() const {
    return static_cast<int64_t>(kv_layout.token_bytes()) * 2 * kv_layout.num_layers;
  }
  // INVALID_ARGUMENT naming the field ("registration.<field>: ...") and its limit.
  absl::Status Validate() const;
};

// One engine step as the decode worker measured it.
struct StepObservation {
  int num_decode = 0;
  int num_prefill_tokens = 0;
  int64_t context_tokens = 0;  // Sum over the step's tokens of the positions each attends to.
  int64_t prefill_context_tokens = 0;  // The prefill chunks' share of context_tokens.
  double duration_ms = 0;
  double host_ms = 0;  // Outside the engine forward (not on the wire; 0 where unknown).
};

// A worker's load at one report.
struct LoadSnapshot {
  int running = 0;
  int waiting = 0;
  int awaiting_kv = 0;                 // Decode: waiting for offloaded KV.
  int64_t free_blocks = 0;             // Decode: free + evictable cached.
  int64_t total_blocks = 0;            // Decode.
  int64_t pending_prefill_tokens = 0;  // Decode: local chunked backlog; prefill: its queue.
  // That backlog's attention work: the sum over its prompts of (their tokens)^2; of a prompt
  // partly computed, (context + rest)^2 - context^2. 0 with a backlog: not reported.
  double pending_prefill_token_squares = 0;
  int64_t context_tokens = 0;            // Decode: tokens of every sequence it holds.
  double prefill_tokens_per_second = 0;  // Prefill: recent throughput.
  double transfer_bytes_per_second = 0;  // Prefill: recent KV bandwidth.
  uint64_t sequence = 0;                 // Reports on this registration so far.
  bool draining = false;                 // Takes no new work (changing role, or stopping).
};

// A load report: the snapshot and the steps run since the previous one.
struct WorkerReport {
  LoadSnapshot load;
  std::vector<StepObservation> steps;
};

// A decode worker's prefix-cache changes since its previous report, which the router's prefix
// index follows. With `reset`, `stored` is the whole cache (a router (re)registered and
// rebuilds its view from it).
struct PrefixCacheChanges {
  bool reset = false;
  std::vector<uint64_t> stored;
  std::vector<uint64_t> evicted;
};

// The steps a decode worker ran since its last report. Between reports at most
// kMaxReportedSteps are kept, the newest (a router that stops reading loses the oldest, and a
// report stays bounded).
class StepHistory {
 public:
  static constexpr size_t kMaxReportedSteps = 512;

  void Add(const StepObservation& step);
  // The steps since the last Take, oldest first; the history is then empty.
  std::vector<StepObservation> Take();
  size_t size() const { return steps_.size(); }

 private:
  std::deque<StepObservation> steps_;
};

// What a prefill worker measured of one prefill, carried by value from its batcher through the
// Prefill answer, the decode worker's offload path and the final GenerateResult (wire/ and the
// router's router_wire.cc convert it at each process's edge).
struct PrefillMeasurement {
  double queue_ms = 0;          // In the prefill worker's queue.
  double compute_ms = 0;        // Its batch's forward.
  double transfer_ms = 0;       // From the first layer written to the last landed.
  double transfer_tail_ms = 0;  // What the transfer added after the forward.
  uint64_t transfer_bytes = 0;  // KV bytes written into the decode worker's pool.
  int computed_tokens = 0;      // Prompt tokens computed.
  // The batch `compute_ms` timed: its prompts' tokens (this one's included) and the sum of
  // their squares (each prompt attends to its own tokens only). 0: not reported.
  int64_t batch_tokens = 0;
  double batch_token_squares = 0;
};

// What a completed offload measured: how fast the prefill worker computed the prompt and how
// long the KV transfer ran past its last layer. The router's cost model learns from it
// (router/learning.h).
struct PrefillOutcome {
  uint64_t model_fingerprint = 0;
  // Prompt tokens the prefill worker computed (0: unknown; the prompt's length is used).
  int computed_tokens = 0;
  int prompt_tokens = 0;
  double compute_ms = 0;  // The prefill worker's compute time: its batch's.
  // What that batch computed (PrefillMeasurement's; 0: a worker that does not say, taken as
  // this prompt alone).
  int64_t batch_tokens = 0;
  double batch_token_squares = 0;
  double transfer_tail_ms = 0;
  // KV bytes the prefill worker wrote (0: unknown; the router's estimate is used).
  uint64_t transfer_bytes = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_COMMON_WORKER_REPORTS_H_
