#include "engine/cpu/cpu_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/cpu/kernels.h"
#include "engine/half.h"
#include "engine/llama_weights.h"

namespace pdserve::engine {
namespace {

// Rows below this run on the calling thread: waking workers costs more than it saves.
constexpr int kMinParallelRows = 4;
// Tokens of one sequence per attention work unit (with all query heads of one KV head).
constexpr int kAttentionTokenTile = 64;

}  // namespace

absl::StatusOr<std::unique_ptr<CpuModel>> CpuModel::Load(Checkpoint& checkpoint,
                                                         const CpuModelOptions& options) {
  std::unique_ptr<CpuModel> model(new CpuModel());
  model->config_ = checkpoint.config();
  model->fingerprint_ = checkpoint.fingerprint();
  int threads = options.num_threads;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads > 256) return absl::InvalidArgumentError("num_threads: at most 256");
  if (options.isa.has_value()) {
    model->isa_ = *options.isa;
  } else {
    ASSIGN_OR_RETURN(model->isa_, DefaultCpuIsa());
  }
  RETURN_IF_ERROR(CheckCpuSupports(model->isa_));
  model->pool_ = std::make_unique<ThreadPool>(threads);
  if (options.weight_type.has_value()) {
    model->weight_type_ = *options.weight_type;
  } else {
    switch (checkpoint.DTypeOf("model.embed_tokens.weight")) {
      case TensorDType::kBF16:
        model->weight_type_ = WeightType::kBF16;
        break;
      case TensorDType::kF16:
        model->weight_type_ = WeightType::kF16;
        break;
      default:
        model->weight_type_ = WeightType::kF32;
    }
  }
  model->attention_scratch_.resize(threads);
  model->attention_rows_.resize(threads);
  RETURN_IF_ERROR(model->LoadWeights(checkpoint));
  const std::vector<std::string> unread = checkpoint.Unread();
  if (!unread.empty()) {
    std::vector<std::string> shown(unread.begin(),
                                   unread.begin() + std::min<size_t>(5, unread.size()));
    return absl::InvalidArgumentError(
        absl::StrCat(checkpoint.dir(), ": ", unread.size(), " unexpected tensor(s) for ",
                     model->config_.architecture, ": ", absl::StrJoin(shown, ", "),
                     unread.size() > shown.size() ? ", ..." : ""));
  }
  model->inv_freq_ = RopeInverseFrequencies(model->config_);
  return model;
}

absl::Status CpuModel::LoadWeights(Checkpoint& ckpt) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  const int64_t q_dim = c.q_dim();
  const int64_t kv_dim = c.kv_dim();
  const int64_t inter = c.intermediate_size;
  const WeightType type = weight_type_;
  std::vector<float> embed, lm_head;
  RETURN_IF_ERROR(ReadLlamaEmbeddings(ckpt, &embed, &final_norm_, &lm_head));
  const size_t embed_elements = embed.size();
  embed_.Resize(embed_elements * WeightTypeBytes(type));
  switch (type) {
    case WeightType::kF32:
      std::memcpy(embed_.data(), embed.data(), embed_elements * sizeof(float));
      break;
    case WeightType::kBF16:
      FloatToBf16(embed.data(), reinterpret_cast<uint16_t*>(embed_.data()), embed_elements);
      break;
    case WeightType::kF16:
      FloatToHalf(embed.data(), reinterpret_cast<uint16_t*>(embed_.data()), embed_elements);
      break;
  }
  lm_head_ = PackedMatrix::Pack(lm_head.data(), c.vocab_size, h, h, type);
  weight_bytes_ = lm_head_.bytes();
  layers_.resize(c.num_layers);
  LlamaLayerWeights w;
  for (int l = 0; l < c.num_layers; ++l) {
    Layer& layer = layers_[l];
    RETURN_IF_ERROR(ReadLlamaLayer(ckpt, l, &w));
    layer.input_norm = std::move(w.input_norm);
    layer.post_norm = std::move(w.post_norm);
    layer.q_norm = std::move(w.q_norm);
    layer.k_norm = std::move(w.k_norm);
    layer.qkv_bias = std::move(w.qkv_bias);
    layer.o_bias = std::move(w.o_bias);
    layer.gate_up_bias = std::move(w.gate_up_bias);
    layer.down_bias = std::move(w.down_bias);
    layer.qkv = PackedMatrix::Pack(w.qkv.data(), static_cast<int>(q_dim + 2 * kv_dim), h, h, type);
    layer.o = PackedMatrix::Pack(w.o.data(), h, q_dim, q_dim, type);
    layer.gate_up = PackedMatrix::Pack(w.gate_up.data(), static_cast<int>(2 * inter), h, h, type);
    layer.down = PackedMatrix::Pack(w.down.data(), h, inter, inter, type);
    weight_bytes_ +=
        layer.qkv.bytes() + layer.o.bytes() + layer.gate_up.bytes() + layer.down.bytes();
  }
  size_t vectors = final_norm_.size();
  for (const Layer& layer : layers_) {
    for (const std::vector<float>* v :
         {&layer.input_norm, &layer.post_norm, &layer.q_norm, &layer.k_norm, &layer.qkv_bias,
          &layer.o_bias, &layer.gate_up_bias, &layer.down_bias}) {
      vectors += v->size();
    }
  }
  memory_bytes_ = weight_bytes_ + embed_.size() + vectors * sizeof(float);
  return absl::OkStatus();
}

void CpuModel::ForRows(int n, const std::function<void(int)>& fn) {
  if (n < kMinParallelRows || pool_->size() == 1) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  pool_->ParallelFor(n, [&](int begin, int end) {
    for (int i = begin; i < end; ++i) fn(i);
  });
}

void CpuModel::WriteKv(kvcache::KvPool& pool, int layer, const float* k, const float* v,
                       const BatchSequence& seq, int position) {
  const KvLayout& layout = pool.layout();
  const int block = seq.block_table[position / layout.block_size];
  const size_t offset = static_cast<size_t>(position % layout.block_size) * layout.token_bytes();
  uint8_t* k_dst = pool.Region(layer, 0, block) + offset;
  uint8_t* v_dst = pool.Region(layer, 1, block) + offset;
  const int n = config_.kv_dim();
  switch (layout.dtype) {
    case DType::kF32:
      std::memcpy(k_dst, k, n * sizeof(float));
      std::memcpy(v_dst, v, n * sizeof(float));
      break;
    case DType::kF16:
      FloatToHalf(k, reinterpret_cast<uint16_t*>(k_dst), n);
      FloatToHalf(v, reinterpret_cast<uint16_t*>(v_dst), n);
      break;
    case DType::kBF16:
      FloatToBf16(k, reinterpret_cast<uint16_t*>(k_dst), n);
      FloatToBf16(v, reinterpret_cast<uint16_t*>(v_dst), n);
      break;
  }
}

absl::Status CpuModel::Forward(const PackedBatch& batch, kvcache::KvPool& pool,
                               const ForwardOptions& options, Logits* logits) {
  const ModelConfig& c = config_;
  const KvLayout& layout = pool.layout();
  RETURN_IF_ERROR(CheckForwardInputs(batch, pool));
  const int T = batch.num_tokens();
  const int S = batch.num_sequences();
  if (T == 0) {
    logits->rows = 0;
    logits->vocab = c.vocab_size;
    logits->data.clear();
    return absl::OkStatus();
  }
  const int hidden = c.hidden_size;
  const int q_dim = c.q_dim();
  const int kv_dim = c.kv_dim();
  const int qkv_dim = q_dim + 2 * kv_dim;
  const int inter = c.intermediate_size;
  const int half = c.head_dim / 2;
  const int group = c.num_heads / c.num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  x_.EnsureSize(static_cast<size_t>(T) * hidden);
  h_.EnsureSize(static_cast<size_t>(T) * hidden);
  tmp_.EnsureSize(static_cast<size_t>(T) * hidden);
  qkv_.EnsureSize(static_cast<size_t>(T) * qkv_dim);
  attn_.EnsureSize(static_cast<size_t>(T) * q_dim);
  gate_up_.EnsureSize(static_cast<size_t>(T) * 2 * inter);
  act_.EnsureSize(static_cast<size_t>(T) * inter);
  rope_cos_.EnsureSize(static_cast<size_t>(T) * half);
  rope_sin_.EnsureSize(static_cast<size_t>(T) * half);
  token_seq_.resize(T);
  token_pos_.resize(T);
  attention_units_.clear();
  for (int s = 0; s < S; ++s) {
    for (int i = 0; i < batch.sequences[s].num_tokens; ++i) {
      const int t = batch.cu_seqlens[s] + i;
      token_seq_[t] = s;
      token_pos_[t] = batch.sequences[s].start_position + i;
    }
    for (int t0 = batch.cu_seqlens[s]; t0 < batch.cu_seqlens[s + 1]; t0 += kAttentionTokenTile) {
      const int t1 = std::min(t0 + kAttentionTokenTile, batch.cu_seqlens[s + 1]);
      for (int kvh = 0; kvh < c.num_kv_heads; ++kvh) attention_units_.push_back({s, kvh, t0, t1});
    }
  }

  // Embedding and rotary tables (angles in double; one table serves every layer).
  ForRows(T, [&](int t) {
    float* row = x_.data() + static_cast<size_t>(t) * hidden;
    const size_t first = static_cast<size_t>(batch.tokens[t]) * hidden;
    switch (weight_type_) {
      case WeightType::kF32:
        std::memcpy(row, reinterpret_cast<const float*>(embed_.data()) + first,
                    hidden * sizeof(float));
        break;
      case WeightType::kBF16:
        Bf16ToFloat(reinterpret_cast<const uint16_t*>(embed_.data()) + first, row, hidden);
        break;
      case WeightType::kF16:
        HalfToFloat(reinterpret_cast<const uint16_t*>(embed_.data()) + first, row, hidden);
        break;
    }
    for (int i = 0; i < half; ++i) {
      const double angle = token_pos_[t] * inv_freq_[i];
      rope_cos_[static_cast<size_t>(t) * half + i] = static_cast<float>(std::cos(angle));
      rope_sin_[static_cast<size_t>(t) * half + i] = static_cast<float>(std::sin(angle));
    }
  });

  for (int l = 0; l < c.num_layers; ++l) {
    const Layer& layer = layers_[l];
    ForRows(T, [&](int t) {
      kernels::RmsNorm(isa_, x_.data() + static_cast<size_t>(t) * hidden, layer.input_norm.data(),
                       c.rms_norm_eps, hidden, h_.data() + static_cast<size_t>(t) * hidden);
    });
    Gemm(isa_, h_.data(), T, hidden, layer.qkv, qkv_.data(), qkv_dim, pool_.get());
    ForRows(T, [&](int t) {
      float* row = qkv_.data() + static_cast<size_t>(t) * qkv_dim;
      if (!layer.qkv_bias.empty()) kernels::Add(row, layer.qkv_bias.data(), qkv_dim);
      float* q = row;
      float* k = row + q_dim;
      if (c.qk_norm) {
        for (int hq = 0; hq < c.num_heads; ++hq) {
          kernels::RmsNorm(isa_, q + hq * c.head_dim, layer.q_norm.data(), c.rms_norm_eps,
                           c.head_dim, q + hq * c.head_dim);
        }
        for (int hk = 0; hk < c.num_kv_heads; ++hk) {
          kernels::RmsNorm(isa_, k + hk * c.head_dim, layer.k_norm.data(), c.rms_norm_eps,
                           c.head_dim, k + hk * c.head_dim);
        }
      }
      const float* cos = rope_cos_.data() + static_cast<size_t>(t) * half;
      const float* sin = rope_sin_.data() + static_cast<size_t>(t) * half;
      kernels::ApplyRope(q, c.num_heads, c.head_dim, cos, sin);
      kernels::ApplyRope(k, c.num_kv_heads, c.head_dim, cos, sin);
      WriteKv(pool, l, k, row + q_dim + kv_dim, batch.sequences[token_seq_[t]], token_pos_[t]);
    });
    if (options.layer_hook && !options.layer_hook(l)) {
      return absl::CancelledError(absl::StrCat("forward cancelled after layer ", l));
    }
    pool_->ParallelForDynamic(static_cast<int>(attention_units_.size()), [&](int worker, int u) {
      const AttentionUnit& unit = attention_units_[u];
      std::vector<AttentionRow>& rows = attention_rows_[worker];
      rows.clear();
      for (int t = unit.token_begin; t < unit.token_end; ++t) {
        for (int g = 0; g < group; ++g) {
          const int head = unit.kv_head * group + g;
          rows.push_back({qkv_.data() + static_cast<size_t>(t) * qkv_dim + head * c.head_dim,
                          attn_.data() + static_cast<size_t>(t) * q_dim + head * c.head_dim,
                          token_pos_[t]});
        }
      }
      AttendRows(isa_, layout, pool.base(), l, unit.kv_head, rows.data(),
                 static_cast<int>(rows.size()), batch.sequences[unit.seq].block_table.data(), scale,
                 &attention_scratch_[worker]);
    });
    Gemm(isa_, attn_.data(), T, q_dim, layer.o, tmp_.data(), hidden, pool_.get());
    ForRows(T, [&](int t) {
      float* x = x_.data() + static_cast<size_t>(t) * hidden;
      float* o = tmp_.data() + static_cast<size_t>(t) * hidden;
      if (!layer.o_bias.empty()) kernels::Add(o, layer.o_bias.data(), hidden);
      kernels::Add(x, o, hidden);
      kernels::RmsNorm(isa_, x, layer.post_norm.data(), c.rms_norm_eps, hidden,
                       h_.data() + static_cast<size_t>(t) * hidden);
    });
    Gemm(isa_, h_.data(), T, hidden, layer.gate_up, gate_up_.data(), 2 * inter, pool_.get());
    ForRows(T, [&](int t) {
      float* gu = gate_up_.data() + static_cast<size_t>(t) * 2 * inter;
      if (!layer.gate_up_bias.empty()) kernels::Add(gu, layer.gate_up_bias.data(), 2 * inter);
      kernels::SiluMul(isa_, gu, gu + inter, inter, act_.data() + static_cast<size_t>(t) * inter);
    });
    Gemm(isa_, act_.data(), T, inter, layer.down, tmp_.data(), hidden, pool_.get());
    ForRows(T, [&](int t) {
      float* d = tmp_.data() + static_cast<size_t>(t) * hidden;
      if (!layer.down_bias.empty()) kernels::Add(d, layer.down_bias.data(), hidden);
      kernels::Add(x_.data() + static_cast<size_t>(t) * hidden, d, hidden);
    });
  }

  // Final norm and lm_head for the last token of each sequence that wants logits.
  const int rows = batch.num_logit_rows();
  int r = 0;
  for (int s = 0; s < S; ++s) {
    if (!batch.sequences[s].want_logits) continue;
    const int t = batch.cu_seqlens[s + 1] - 1;
    kernels::RmsNorm(isa_, x_.data() + static_cast<size_t>(t) * hidden, final_norm_.data(),
                     c.rms_norm_eps, hidden, h_.data() + static_cast<size_t>(r) * hidden);
    ++r;
  }
  logits->rows = rows;
  logits->vocab = c.vocab_size;
  logits->data.resize(static_cast<size_t>(rows) * c.vocab_size);
  Gemm(isa_, h_.data(), rows, hidden, lm_head_, logits->data.data(), c.vocab_size, pool_.get());
  return absl::OkStatus();
}

}  // namespace pdserve::engine
