#include "engine/emulated/emulated_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace pdserve::engine {
namespace {

// splitmix64's finaliser: a bijective mix with full avalanche.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
// The first 8 bytes of a token's K or V slot hold its state.
constexpr size_t kStateBytes = sizeof(uint64_t);

uint64_t LoadState(const uint8_t* slot) {
  uint64_t v;
  std::memcpy(&v, slot, kStateBytes);
  return v;
}
void StoreState(uint8_t* slot, uint64_t v) { std::memcpy(slot, &v, kStateBytes); }

}  // namespace

ChainState ChainState::Initial(int layer) {
  const uint64_t k = Mix(kGolden * static_cast<uint64_t>(layer + 1));
  return {.k = k, .v = Mix(k ^ kGolden)};
}

ChainState ChainState::Next(int32_t token, int layer) const {
  // Both of the previous position's slots enter the next state, so a wrong byte in either
  // changes every later token of the sequence.
  const uint64_t input = Mix(static_cast<uint64_t>(static_cast<uint32_t>(token)) * kGolden +
                             static_cast<uint64_t>(layer));
  const uint64_t next_k = Mix(k ^ Mix(v + kGolden) ^ input);
  return {.k = next_k, .v = Mix(next_k + 0x632be59bd9b4e019ULL)};
}

absl::Status EmulatedModelOptions::Validate() const {
  if (timing != "decode" && timing != "prefill") {
    return absl::InvalidArgumentError(
        absl::StrCat("emulated timing: '", timing, "' is not one of decode, prefill"));
  }
  if (!(jitter >= 0 && jitter <= 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--emulated_jitter: ", jitter, " is outside [0, 2]"));
  }
  if (kv_bytes_per_token < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--emulated_kv_bytes_per_token: ", kv_bytes_per_token, " must be >= 0"));
  }
  if (output_vocab < 0) return absl::InvalidArgumentError("emulated output_vocab: must be >= 0");
  RETURN_IF_ERROR(profile.timing.Validate());
  if (profile.has_shape) RETURN_IF_ERROR(profile.shape.Validate());
  if (profile.shape.kv_layout.num_layers < 1 || profile.shape.kv_layout.num_layers > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("--profile: cluster.num_layers ",
                                                   profile.shape.kv_layout.num_layers,
                                                   " is outside [1, 1024]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<EmulatedModel>> EmulatedModel::Create(
    const ModelConfig& base, const EmulatedModelOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  RETURN_IF_ERROR(base.Validate());
  const int layers = options.profile.shape.kv_layout.num_layers;
  const int64_t element = static_cast<int64_t>(DTypeSize(options.kv_dtype));
  const int64_t per_slot_unit = 2 * layers * element;  // One element of K and V, all layers.
  const int64_t min_bytes = 2 * layers * static_cast<int64_t>(kStateBytes);
  const int64_t bytes = options.kv_bytes_per_token == 0 ? min_bytes : options.kv_bytes_per_token;
  if (bytes < min_bytes || bytes % per_slot_unit != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--emulated_kv_bytes_per_token: ", bytes, " must be a multiple of ", per_slot_unit,
        " (K and V of ", layers, " layers, ", DTypeName(options.kv_dtype), ") and at least ",
        min_bytes, " (8 bytes of state per layer and K|V)"));
  }
  ModelConfig config = base;
  config.num_layers = layers;
  config.num_heads = 1;
  config.num_kv_heads = 1;
  config.head_dim = static_cast<int>(bytes / per_slot_unit);
  if (config.head_dim % 2 != 0) ++config.head_dim;  // The config's rule; never shrinks below.
  config.hidden_size = config.head_dim;
  return std::unique_ptr<EmulatedModel>(new EmulatedModel(config, options));
}

EmulatedModel::EmulatedModel(const ModelConfig& config, const EmulatedModelOptions& options)
    : config_(config),
      options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      rng_(options.jitter_seed) {
  // Workers share KV only with the same fingerprint: the same geometry, the same profile and
  // the same token function (never a real model's).
  Xxh64State h(0x656d756c61746564ULL);  // "emulated"
  const CostModelParams& t = options.profile.timing;
  const double timing[] = {t.step_intercept_ms,
                           t.step_per_decode_ms,
                           t.step_per_prefill_token_ms,
                           t.step_per_attention_ms,
                           t.step_per_prefill_attention_ms,
                           t.prefill_overhead_ms,
                           t.prefill_per_token_ms,
                           t.prefill_per_token_squared_ms,
                           t.transfer_latency_ms,
                           t.transfer_bytes_per_ms};
  h.Update(timing, sizeof(timing));
  const int geometry[] = {config_.num_layers, config_.head_dim, config_.vocab_size,
                          config_.max_position_embeddings, options.output_vocab};
  h.Update(geometry, sizeof(geometry));
  for (int eos : config_.eos_token_ids) h.Update(&eos, sizeof(eos));
  fingerprint_ = h.Digest();
  if (options.profile.has_shape) {
    pool_hint_.block_size = options.profile.shape.kv_layout.block_size;
    pool_hint_.num_blocks = options.profile.shape.kv_blocks_for(options.timing);
  }
  const int vocab = options.output_vocab > 0 ? std::min(options.output_vocab, config_.vocab_size)
                                             : config_.vocab_size;
  excluded_.assign(vocab, false);
  int excluded = 0;
  for (int eos : config_.eos_token_ids) {
    if (eos >= 0 && eos < vocab && !excluded_[eos]) {
      excluded_[eos] = true;
      ++excluded;
    }
  }
  if (excluded == vocab) excluded_.assign(vocab, false);  // Nothing else to draw from.
}

int64_t EmulatedModel::kv_bytes_per_token(DType dtype) const {
  return int64_t{2} * config_.num_layers * config_.num_kv_heads * config_.head_dim *
         static_cast<int64_t>(DTypeSize(dtype));
}

double EmulatedModel::ModelledMs(const PackedBatch& batch) const {
  const CostModelParams& t = options_.profile.timing;
  if (options_.timing == "prefill") {
    std::vector<PrefillPiece> pieces;
    pieces.reserve(batch.sequences.size());
    for (const BatchSequence& s : batch.sequences) {
      pieces.push_back({.tokens = static_cast<double>(s.num_tokens),
                        .cached = static_cast<double>(s.start_position)});
    }
    return t.PrefillBatchMs(pieces);
  }
  // What decode::ObserveStep reports of the same step (decode_worker/step_report.h).
  StepWork work;
  for (const BatchSequence& s : batch.sequences) {
    const double n = s.num_tokens;
    const double positions = n * s.start_position + n * (n + 1) / 2;
    if (s.decode) {
      work.decode += n;
      work.decode_attention += positions;
    } else {
      work.prefill_tokens += n;
      work.prefill_attention += positions;
    }
  }
  return t.StepMs(work);
}

absl::Status EmulatedModel::WriteLayer(const PackedBatch& batch, kvcache::KvPool& pool, int layer,
                                       std::vector<uint64_t>* last_states) {
  const KvLayout& layout = pool.layout();
  const size_t token_bytes = layout.token_bytes();
  const int bs = layout.block_size;
  auto slot = [&](const BatchSequence& s, int kv, int position) {
    return pool.Region(layer, kv, s.block_table[position / bs]) +
           static_cast<size_t>(position % bs) * token_bytes;
  };
  for (int i = 0; i < batch.num_sequences(); ++i) {
    const BatchSequence& s = batch.sequences[i];
    ChainState state = ChainState::Initial(layer);
    if (s.start_position > 0) {
      state.k = LoadState(slot(s, 0, s.start_position - 1));
      state.v = LoadState(slot(s, 1, s.start_position - 1));
    }
    const int32_t* tokens = batch.tokens.data() + batch.cu_seqlens[i];
    for (int j = 0; j < s.num_tokens; ++j) {
      state = state.Next(tokens[j], layer);
      const int position = s.start_position + j;
      StoreState(slot(s, 0, position), state.k);
      StoreState(slot(s, 1, position), state.v);
    }
    (*last_states)[i] ^= Mix(state.k ^ Mix(state.v));
  }
  return absl::OkStatus();
}

int32_t EmulatedModel::PickToken(uint64_t hash) const {
  const int vocab = static_cast<int>(excluded_.size());
  int32_t id = static_cast<int32_t>(hash % static_cast<uint64_t>(vocab));
  while (excluded_[id]) id = (id + 1) % vocab;
  return id;
}

absl::Status EmulatedModel::Forward(const PackedBatch& batch, kvcache::KvPool& pool,
                                    const ForwardOptions& options, Logits* logits) {
  RETURN_IF_ERROR(CheckForwardInputs(batch, pool));
  if (pool.layout().token_bytes() < kStateBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("emulated backend: a KV slot of ", pool.layout().token_bytes(),
                     " bytes cannot hold the 8-byte state (raise --emulated_kv_bytes_per_token)"));
  }
  const absl::Time start = clock_->Now();
  double ms = ModelledMs(batch);
  if (options_.jitter > 0) {
    const double sigma = options_.jitter;
    ms *= std::exp(sigma * normal_(rng_) - sigma * sigma / 2);
  }
  const absl::Duration total = absl::Microseconds(ms * 1e3);
  const int layers = config_.num_layers;
  std::vector<uint64_t> last_states(batch.num_sequences(), 0);
  for (int layer = 0; layer < layers; ++layer) {
    RETURN_IF_ERROR(WriteLayer(batch, pool, layer, &last_states));
    if (options.layer_hook) {
      clock_->SleepUntil(start + total * (layer + 1) / layers);
      if (!options.layer_hook(layer))
        return absl::CancelledError("forward cancelled by layer hook");
    }
  }
  clock_->SleepUntil(start + total);

  const int rows = batch.num_logit_rows();
  logits->rows = rows;
  logits->vocab = config_.vocab_size;
  std::vector<uint64_t> row_states;  // The state hash of each logits row's sequence.
  for (int i = 0; i < batch.num_sequences(); ++i) {
    if (batch.sequences[i].want_logits) row_states.push_back(last_states[i]);
  }
  if (static_cast<int>(options.sample_rows.size()) == rows) {
    // "Samples on the device": each row's token from its state and, when sampling, its draw.
    logits->data.clear();
    logits->sampled.resize(rows);
    for (int r = 0; r < rows; ++r) {
      const RowSampling& row = options.sample_rows[r];
      if (row.config == nullptr || row.config->greedy()) {
        logits->sampled[r] = PickToken(row_states[r]);
        continue;
      }
      const double u = UniformForPosition(row.config->seed, row.position);
      uint64_t draw;
      std::memcpy(&draw, &u, sizeof(draw));
      logits->sampled[r] = PickToken(Mix(row_states[r] ^ Mix(draw)));
    }
    return absl::OkStatus();
  }
  // Logits asked for: one-hot at the greedy token (what SampleToken picks greedily).
  logits->sampled.clear();
  logits->data.assign(static_cast<size_t>(rows) * config_.vocab_size, 0.0f);
  for (int r = 0; r < rows; ++r)
    logits->data[static_cast<size_t>(r) * config_.vocab_size + PickToken(row_states[r])] = 1.0f;
  return absl::OkStatus();
}

}  // namespace pdserve::engine
