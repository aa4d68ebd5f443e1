// The emulated backend: a Model whose forward pass takes a performance profile's modelled
// time (common/perf_profile.h, the formulas pdserve-sim times its workers with) instead of
// computing, so that the real cluster (router, scheduler, paged KV, prefix cache, offloads,
// UCX transfers) runs on a GPU profile's timing on machines without that GPU.
//
// What is real and what is modelled (docs/emulated.md):
// - Time: a forward step waits, on an absolute deadline from its start (no drift, no busy
//   wait), for the profile's step time for that batch (a decode worker: the step formula over
//   its decodes and chunks; a prefill worker: the prefill formula over its prompts), times a
//   log-normal jitter factor as in the simulator. With a layer hook, layer l is announced at
//   (l + 1) / num_layers of the step, as the simulator's layer-wise transfer assumes.
// - KV: real, small, and checked. Each layer's K and V of a token hold a 64-bit chain state
//   (its first 8 bytes; the rest of the slot is not written), computed from the previous
//   position's state read back from the pool and the token. So the KV at a position is a
//   function of the token prefix, as a real model's is: the prefix cache and offloaded KV
//   give the same states as a local prefill exactly when every byte landed where it belongs.
// - Tokens: the next token is a hash of every layer's state at the last position (greedy), or
//   of that and the request's (seed, position) draw (sampling), drawn from the tokenizer's ids
//   minus the end-of-sequence ids: outputs run to max_tokens or a stop, as in the simulator.
// The model's geometry: the model directory's config.json (vocabulary, context length, EOS)
// with the profile's layer count, one KV head and a head_dim that makes a token's K and V
// over all layers --emulated_kv_bytes_per_token bytes (far fewer than the profile's model:
// the KV link's time is modelled by the transport, kvtransfer/paced/).
// Thread-safety: as Model (Forward runs one batch at a time).
#ifndef PDSERVE_ENGINE_EMULATED_EMULATED_MODEL_H_
#define PDSERVE_ENGINE_EMULATED_EMULATED_MODEL_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/perf_profile.h"
#include "engine/model.h"

namespace pdserve::engine {

struct EmulatedModelOptions {
  PerfProfile profile;
  // Which of the profile's formulas times a forward: "decode" (the decode worker's step) or
  // "prefill" (the prefill worker's batch). Default decode.
  std::string timing = "decode";
  // Sigma of the log-normal factor each step's time is multiplied by (mean 1); 0: none.
  double jitter = 0;
  // Seed of the jitter's draws.
  uint64_t jitter_seed = 1;
  // K and V bytes per token over all layers, at `kv_dtype`; 0: the least that holds the
  // chain state (8 bytes per layer and K|V). Must be a multiple of 2 * num_layers * element.
  int64_t kv_bytes_per_token = 0;
  DType kv_dtype = DType::kF32;
  // Tokens are drawn from [0, output_vocab) (the tokenizer's ids); 0: the config's vocabulary.
  int output_vocab = 0;
  // Null: the real clock.
  Clock* clock = nullptr;

  absl::Status Validate() const;
};

class EmulatedModel final : public Model {
 public:
  // `base` is the model directory's config.json (its vocabulary, context and EOS ids are
  // kept; its layers and KV geometry are replaced as described above).
  static absl::StatusOr<std::unique_ptr<EmulatedModel>> Create(const ModelConfig& base,
                                                               const EmulatedModelOptions& options);

  const ModelConfig& config() const override { return config_; }
  uint64_t fingerprint() const override { return fingerprint_; }
  size_t weight_bytes() const override { return 0; }
  size_t memory_bytes() const override { return 0; }
  std::string backend_name() const override { return "emulated"; }
  KvPoolHint kv_pool_hint() const override { return pool_hint_; }
  // The stand-in pool is left unbacked until used: an idle emulated worker holds little memory.
  absl::StatusOr<std::unique_ptr<kvcache::KvPool>> AllocateKvPool(
      const KvLayout& layout) const override {
    return kvcache::KvPool::Allocate(layout, /*commit=*/false);
  }

  absl::Status Forward(const PackedBatch& batch, kvcache::KvPool& pool,
                       const ForwardOptions& options, Logits* logits) override;

  // The modelled time of a batch, before jitter (what Forward waits for with jitter 0).
  double ModelledMs(const PackedBatch& batch) const;
  // K and V bytes per token over all layers in a pool of `dtype`.
  int64_t kv_bytes_per_token(DType dtype) const;
  // The profile's own K and V bytes per token (what the emulated bytes stand for).
  int64_t profile_kv_bytes_per_token() const { return options_.profile.shape.kv_bytes_per_token(); }

 private:
  EmulatedModel(const ModelConfig& config, const EmulatedModelOptions& options);

  // Writes every token's chain state for `layer` and returns the states at each sequence's
  // last position (one per sequence).
  absl::Status WriteLayer(const PackedBatch& batch, kvcache::KvPool& pool, int layer,
                          std::vector<uint64_t>* last_states);
  int32_t PickToken(uint64_t hash) const;

  ModelConfig config_;
  EmulatedModelOptions options_;
  Clock* clock_;
  uint64_t fingerprint_ = 0;
  KvPoolHint pool_hint_;
  std::vector<bool> excluded_;  // By id: the end-of-sequence ids, never drawn.
  std::mt19937_64 rng_;         // Jitter draws; Forward only.
  std::normal_distribution<double> normal_;
};

// The chain state of one (layer, position) from the previous position's (K, V) states and the
// token at the position: what a token's K and V slots hold (K = the state, V = its mix).
struct ChainState {
  uint64_t k = 0;
  uint64_t v = 0;
  static ChainState Initial(int layer);
  ChainState Next(int32_t token, int layer) const;
};

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_EMULATED_EMULATED_MODEL_H_
