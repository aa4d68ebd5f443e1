// A worker's performance profile: how long its forward passes and KV transfers take (the
// step, prefill and transfer formulas with their coefficients, cost_model.json's format) and
// the shape of one worker (its optional "cluster" object: KV geometry, pool and batch limits).
//
// One definition for everything that models a worker's time: the router's cost model starts
// from these coefficients and refines them online (router/cost_model.h), pdserve-sim times its
// simulated workers with them, and the emulated backend (engine/emulated/) waits them out on
// real processes. A change to a formula here changes all three together.
//
// Step time (ms) of a decode worker's engine step:
//   step = intercept + per_decode * D + per_prefill_token * P
//          + per_attention * A_decode + per_prefill_attention * A_prefill
// with D decode tokens, P prefill-chunk tokens, A_decode the KV positions the decodes attend
// to (summed) and A_prefill the positions the chunks' tokens attend to (a chunk of P tokens
// after S cached ones adds P*S + P(P+1)/2).
// Forward time (ms) of a prefill worker's batch of prompts:
//   overhead + sum over its prompts of (per_token * L + per_token_squared * L^2)
// (each prompt attends only to itself; a prompt computed after C cached tokens pays for its
// L - C tokens and for (L^2 - C^2) of the quadratic term).
// KV transfer: a layer of B bytes occupies the link for B / bytes_per_ms; the receiver sees
// the last byte latency_ms after it left.
// Thread-safety: plain values.
#ifndef PDSERVE_COMMON_PERF_PROFILE_H_
#define PDSERVE_COMMON_PERF_PROFILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/kv_layout.h"
#include "common/worker_reports.h"

namespace pdserve {

// What one engine step computes (see the step formula above).
struct StepWork {
  double decode = 0;             // D: decode tokens.
  double prefill_tokens = 0;     // P: prefill-chunk tokens.
  double decode_attention = 0;   // A_decode: KV positions the decodes attend to, summed.
  double prefill_attention = 0;  // A_prefill: KV positions the chunks' tokens attend to.
  // A chunk of `tokens` after `cached` ones: its P and A_prefill.
  static StepWork Chunk(double tokens, double cached) {
    return {.prefill_tokens = tokens,
            .prefill_attention = tokens * cached + tokens * (tokens + 1) / 2};
  }
  // What a step a decode worker reported computed.
  static StepWork Of(const StepObservation& s) {
    return {.decode = static_cast<double>(s.num_decode),
            .prefill_tokens = static_cast<double>(s.num_prefill_tokens),
            .decode_attention = static_cast<double>(s.context_tokens - s.prefill_context_tokens),
            .prefill_attention = static_cast<double>(s.prefill_context_tokens)};
  }
};

// One prompt of a prefill worker's batch: `tokens` computed after `cached` ones.
struct PrefillPiece {
  double tokens = 0;
  double cached = 0;
};

struct CostModelParams {
  // Decode worker step, ms.
  double step_intercept_ms = 2.0;
  double step_per_decode_ms = 0.3;
  double step_per_prefill_token_ms = 0.5;
  double step_per_attention_ms = 1e-5;          // Per KV position a decode attends to.
  double step_per_prefill_attention_ms = 1e-5;  // Per KV position a chunk's token attends to.
  // Prefill worker, ms.
  double prefill_overhead_ms = 2.0;
  double prefill_per_token_ms = 0.5;
  double prefill_per_token_squared_ms = 5e-6;
  // Layer-wise KV transfer tail: fixed latency plus the last layer at this bandwidth.
  double transfer_latency_ms = 0.5;
  double transfer_bytes_per_ms = 2e6;
  // gRPC round trips and scheduling the offload adds to TTFT, ms.
  double offload_overhead_ms = 2.0;
  // Online refinement: forgetting factor of the least-squares fits (1 = never forget) and
  // how much the prior is trusted (its variance; larger adapts faster).
  double forgetting = 0.995;
  double prior_variance = 100.0;

  absl::Status Validate() const;
  // The step formula with these coefficients (the prior; router::CostModel::StepMs predicts
  // with the refined fit).
  double StepMs(const StepWork& work) const;
  // One prompt's share of a prefill worker's forward (without the batch's overhead).
  double PrefillPieceMs(const PrefillPiece& piece) const;
  // A prefill worker's forward over a batch: the overhead once, then every prompt.
  double PrefillBatchMs(absl::Span<const PrefillPiece> batch) const;
  // How long `bytes` occupy the KV link.
  double LinkMs(double bytes) const { return bytes / transfer_bytes_per_ms; }
};

// Parses cost_model.json (see deploy/cost_model.json for the format). Unknown keys are an
// error so that a typo does not silently keep a default; "description", "calibration" and
// "cluster" are skipped (the last is the worker shape, ParsePerfProfile's).
absl::StatusOr<CostModelParams> ParseCostModel(const std::string& json_text);
// Reads and parses `path`; errors name the flag that gave it (`flag`, e.g. "--cost_model").
absl::StatusOr<CostModelParams> LoadCostModel(const std::string& path,
                                              const std::string& flag = "--cost_model");

// One worker: a model replica over gpus_per_worker devices (or CPU cores).
struct WorkerShape {
  int gpus_per_worker = 1;
  KvLayout kv_layout;  // num_blocks: a decode worker's pool.
  int max_num_batched_tokens = 512;
  int max_num_seqs = 256;
  int max_awaiting_kv = 1024;  // Offloads awaiting their KV at most (--max_awaiting_kv).
  int max_context_tokens = 4096;
  int prefill_max_batch_tokens = 8192;
  int prefill_kv_blocks = 0;  // The prefill worker's own pool; 0: as a decode worker's.
  int vocab_size = 32000;
  // K and V of every layer for one token, at the profile's geometry.
  int64_t kv_bytes_per_token() const {
    return static_cast<int64_t>(kv_layout.token_bytes()) * 2 * kv_layout.num_layers;
  }
  // The pool a worker of `role` ("decode" or "prefill") holds.
  int kv_blocks_for(const std::string& role) const {
    return role == "prefill" && prefill_kv_blocks > 0 ? prefill_kv_blocks : kv_layout.num_blocks;
  }
  absl::Status Validate() const;
};

struct PerfProfile {
  std::string path;
  // The times a worker of this profile takes.
  CostModelParams timing;
  WorkerShape shape;
  bool has_shape = false;  // The file carried a "cluster" object.
};

// Reads a cost_model.json; its optional "cluster" object gives the worker shape:
//   gpus_per_worker, num_layers, num_kv_heads, head_dim, dtype (f32|f16|bf16), block_size,
//   kv_blocks, max_num_batched_tokens, max_num_seqs, max_awaiting_kv, max_context_tokens,
//   prefill_max_batch_tokens, prefill_kv_blocks, vocab_size
// (all optional; unknown keys are an error naming them).
absl::StatusOr<PerfProfile> ParsePerfProfile(const std::string& json_text);
// Errors start with `path` (and say it cannot be read when it cannot).
absl::StatusOr<PerfProfile> LoadPerfProfile(const std::string& path);

}  // namespace pdserve

#endif  // PDSERVE_COMMON_PERF_PROFILE_H_
