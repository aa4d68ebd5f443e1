// What the simulator models instead of running it: how long a worker's forward pass takes (a
// calibration in the router's cost_model.json format: what `pdserve-bench interference`
// writes, or a roofline estimate under deploy/profiles/), the shape of one worker (its KV
// layout, pool and step budgets: the file's optional "cluster" object, else flags), and the
// wire (KV link bandwidth and latency from the calibration's "transfer", a constant per RPC).
// Thread-safety: plain values.
#ifndef PDSERVE_BENCH_SIM_SIM_PROFILE_H_
#define PDSERVE_BENCH_SIM_SIM_PROFILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/kv_layout.h"
#include "router/cost_model.h"

namespace pdserve::sim {

// One worker: a model replica over gpus_per_worker devices (or CPU cores).
struct WorkerShape {
  int gpus_per_worker = 1;
  KvLayout kv_layout;  // num_blocks: a decode worker's pool.
  int max_num_batched_tokens = 512;
  int max_num_seqs = 256;
  int max_context_tokens = 4096;
  int prefill_max_batch_tokens = 8192;
  int prefill_kv_blocks = 0;  // The prefill worker's own pool; 0: as a decode worker's.
  int vocab_size = 32000;
  int64_t kv_bytes_per_token() const {
    return static_cast<int64_t>(kv_layout.token_bytes()) * 2 * kv_layout.num_layers;
  }
  absl::Status Validate() const;
};

struct SimProfile {
  std::string path;
  // The "true" times the simulated workers take (the router starts from its own prior).
  router::CostModelParams timing;
  WorkerShape shape;
  bool has_shape = false;  // The file carried a "cluster" object.
};

// Reads a cost_model.json; its optional "cluster" object gives the worker shape:
//   gpus_per_worker, num_layers, num_kv_heads, head_dim, dtype (f32|f16|bf16), block_size,
//   kv_blocks, max_num_batched_tokens, max_num_seqs, max_context_tokens,
//   prefill_max_batch_tokens, prefill_kv_blocks, vocab_size
// (all optional; unknown keys are an error naming them).
absl::StatusOr<SimProfile> ParseSimProfile(const std::string& json_text);
absl::StatusOr<SimProfile> LoadSimProfile(const std::string& path);

}  // namespace pdserve::sim

#endif  // PDSERVE_BENCH_SIM_SIM_PROFILE_H_
