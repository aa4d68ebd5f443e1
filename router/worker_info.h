// The router's domain view of a worker, free of the wire: what it registered as (WorkerInfo),
// what it last reported (LoadSnapshot, with the engine steps since the previous report:
// common/worker_reports.h), and the changes of its prefix cache. router_wire.h and
// wire/report_bridge.h convert the Registry protos to these, once, at the edge; the
// registry, the placer, the cost model and the simulator see only these.
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
#include "common/worker_reports.h"

namespace pdserve::router {

enum class WorkerRole { kDecode, kPrefill };
inline constexpr size_t kMaxWorkerIdBytes = 128;  // A worker id's longest.
absl::string_view RoleName(WorkerRole role);      // "decode" or "prefill".

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

// StepObservation, LoadSnapshot and WorkerReport: common/worker_reports.h (the workers and
// the simulator build the same values).

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
  bool switching = false;  // Told to change role; not registered in the new one yet.
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_WORKER_INFO_H_
