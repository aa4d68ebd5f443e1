// The router's domain view of a worker, free of the wire: what it registered as (WorkerInfo),
// what it last reported (LoadSnapshot, with the engine steps since the previous report), and
// the changes of its prefix cache. registry_wire.h converts the Registry protos to these, once,
// at the edge; the registry, the placer, the cost model and the simulator see only these.
// Thread-safety: plain value types.
#ifndef PDSERVE_ROUTER_WORKER_INFO_H_
#define PDSERVE_ROUTER_WORKER_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/kv_layout.h"

namespace pdserve::router {

enum class WorkerRole { kDecode, kPrefill };
absl::string_view RoleName(WorkerRole role);  // "decode" or "prefill".

// A worker as it registered.
struct WorkerInfo {
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

  bool is_decode() const { return role == WorkerRole::kDecode; }
  bool is_prefill() const { return role == WorkerRole::kPrefill; }
  // KV bytes of one token over all layers, K and V.
  int64_t kv_bytes_per_token() const {
    return static_cast<int64_t>(kv_layout.token_bytes()) * 2 * kv_layout.num_layers;
  }
  // INVALID_ARGUMENT naming the field ("registration.<field>: ...") and its limit.
  absl::Status Validate() const;
};

// One engine step as the decode worker measured it (the cost model's training data).
struct StepObservation {
  int num_decode = 0;
  int num_prefill_tokens = 0;
  int64_t context_tokens = 0;  // Sum over the step's tokens of the positions each attends to.
  int64_t prefill_context_tokens = 0;  // The prefill chunks' share of context_tokens.
  double duration_ms = 0;
};

// A worker's latest load report.
struct LoadSnapshot {
  int running = 0;
  int waiting = 0;
  int awaiting_kv = 0;                   // Decode: waiting for offloaded KV.
  int64_t free_blocks = 0;               // Decode: free + evictable cached.
  int64_t total_blocks = 0;              // Decode.
  int64_t pending_prefill_tokens = 0;    // Decode: local chunked backlog; prefill: its queue.
  double prefill_tokens_per_second = 0;  // Prefill: recent throughput.
  double transfer_bytes_per_second = 0;  // Prefill: recent KV bandwidth.
  uint64_t sequence = 0;                 // Reports on this registration so far.
};

// A load report as it arrives: the snapshot and the steps run since the previous one.
struct WorkerReport {
  LoadSnapshot load;
  std::vector<StepObservation> steps;
};

// Changes of a decode worker's prefix cache (chained block hashes).
struct PrefixCacheUpdate {
  bool reset = false;  // Drop everything reported before; `stored` is the whole cache.
  std::vector<uint64_t> stored;
  std::vector<uint64_t> evicted;
};

// One registered worker as `pdctl status` shows it.
struct WorkerStatus {
  WorkerInfo info;
  LoadSnapshot load;
  absl::Duration since_report;
  absl::Duration registered_for;
  int router_in_flight = 0;
  int64_t indexed_blocks = 0;
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_WORKER_INFO_H_
