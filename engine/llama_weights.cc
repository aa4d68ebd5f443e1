#include "engine/llama_weights.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::engine {
namespace {

std::string LayerName(int layer, absl::string_view suffix) {
  return absl::StrCat("model.layers.", layer, ".", suffix);
}

}  // namespace

absl::Status ReadLlamaLayer(Checkpoint& ckpt, int l, LlamaLayerWeights* out) {
  const ModelConfig& c = ckpt.config();
  const int64_t h = c.hidden_size;
  const int64_t q_dim = c.q_dim();
  const int64_t kv_dim = c.kv_dim();
  const int64_t inter = c.intermediate_size;
  auto read_vector = [&](const std::string& name, int64_t n, std::vector<float>* v) {
    v->resize(n);
    return ckpt.ReadF32(name, {n}, v->data());
  };
  LlamaLayerWeights& w = *out;
  RETURN_IF_ERROR(read_vector(LayerName(l, "input_layernorm.weight"), h, &w.input_norm));
  RETURN_IF_ERROR(read_vector(LayerName(l, "post_attention_layernorm.weight"), h, &w.post_norm));
  w.qkv.assign((q_dim + 2 * kv_dim) * h, 0.f);
  RETURN_IF_ERROR(ckpt.ReadF32(LayerName(l, "self_attn.q_proj.weight"), {q_dim, h}, w.qkv.data()));
  RETURN_IF_ERROR(
      ckpt.ReadF32(LayerName(l, "self_attn.k_proj.weight"), {kv_dim, h}, w.qkv.data() + q_dim * h));
  RETURN_IF_ERROR(ckpt.ReadF32(LayerName(l, "self_attn.v_proj.weight"), {kv_dim, h},
                               w.qkv.data() + (q_dim + kv_dim) * h));
  w.qkv_bias.clear();
  if (c.qkv_bias) {
    w.qkv_bias.resize(q_dim + 2 * kv_dim);
    RETURN_IF_ERROR(
        ckpt.ReadF32(LayerName(l, "self_attn.q_proj.bias"), {q_dim}, w.qkv_bias.data()));
    RETURN_IF_ERROR(
        ckpt.ReadF32(LayerName(l, "self_attn.k_proj.bias"), {kv_dim}, w.qkv_bias.data() + q_dim));
    RETURN_IF_ERROR(ckpt.ReadF32(LayerName(l, "self_attn.v_proj.bias"), {kv_dim},
                                 w.qkv_bias.data() + q_dim + kv_dim));
  }
  w.q_norm.clear();
  w.k_norm.clear();
  if (c.qk_norm) {
    RETURN_IF_ERROR(read_vector(LayerName(l, "self_attn.q_norm.weight"), c.head_dim, &w.q_norm));
    RETURN_IF_ERROR(read_vector(LayerName(l, "self_attn.k_norm.weight"), c.head_dim, &w.k_norm));
  }
  w.o.assign(h * q_dim, 0.f);
  RETURN_IF_ERROR(ckpt.ReadF32(LayerName(l, "self_attn.o_proj.weight"), {h, q_dim}, w.o.data()));
  w.o_bias.clear();
  if (c.o_bias) RETURN_IF_ERROR(read_vector(LayerName(l, "self_attn.o_proj.bias"), h, &w.o_bias));
  w.gate_up.assign(2 * inter * h, 0.f);
  RETURN_IF_ERROR(ckpt.ReadF32(LayerName(l, "mlp.gate_proj.weight"), {inter, h}, w.gate_up.data()));
  RETURN_IF_ERROR(
      ckpt.ReadF32(LayerName(l, "mlp.up_proj.weight"), {inter, h}, w.gate_up.data() + inter * h));
  w.down.assign(h * inter, 0.f);
  RETURN_IF_ERROR(ckpt.ReadF32(LayerName(l, "mlp.down_proj.weight"), {h, inter}, w.down.data()));
  w.gate_up_bias.clear();
  w.down_bias.clear();
  if (c.mlp_bias) {
    w.gate_up_bias.resize(2 * inter);
    RETURN_IF_ERROR(
        ckpt.ReadF32(LayerName(l, "mlp.gate_proj.bias"), {inter}, w.gate_up_bias.data()));
    RETURN_IF_ERROR(
        ckpt.ReadF32(LayerName(l, "mlp.up_proj.bias"), {inter}, w.gate_up_bias.data() + inter));
    RETURN_IF_ERROR(read_vector(LayerName(l, "mlp.down_proj.bias"), h, &w.down_bias));
  }
  return absl::OkStatus();
}

absl::Status ReadLlamaEmbeddings(Checkpoint& ckpt, std::vector<float>* embed,
                                 std::vector<float>* final_norm, std::vector<float>* lm_head) {
  const ModelConfig& c = ckpt.config();
  const int64_t h = c.hidden_size;
  embed->resize(static_cast<size_t>(c.vocab_size) * h);
  RETURN_IF_ERROR(ckpt.ReadF32("model.embed_tokens.weight", {c.vocab_size, h}, embed->data()));
  final_norm->resize(h);
  RETURN_IF_ERROR(ckpt.ReadF32("model.norm.weight", {h}, final_norm->data()));
  if (c.tie_word_embeddings) {
    if (ckpt.Has("lm_head.weight")) {  // Some exports include the tied copy; it is ignored.
      lm_head->resize(embed->size());
      RETURN_IF_ERROR(ckpt.ReadF32("lm_head.weight", {c.vocab_size, h}, lm_head->data()));
    }
    *lm_head = *embed;
  } else {
    lm_head->resize(embed->size());
    RETURN_IF_ERROR(ckpt.ReadF32("lm_head.weight", {c.vocab_size, h}, lm_head->data()));
  }
  return absl::OkStatus();
}

std::vector<double> RopeInverseFrequencies(const ModelConfig& config) {
  const int half = config.head_dim / 2;
  std::vector<double> inv_freq(half);
  const RopeScaling& s = config.rope_scaling;
  for (int i = 0; i < half; ++i) {
    double freq = 1.0 / std::pow(config.rope_theta, 2.0 * i / config.head_dim);
    if (s.type == RopeScalingType::kLinear) {
      freq /= s.factor;
    } else if (s.type == RopeScalingType::kLlama3) {
      // Llama 3.1: keep high frequencies, divide low ones by `factor`, blend in between.
      const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
      const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
      const double wavelen = 2 * std::numbers::pi / freq;
      if (wavelen > low_wavelen) {
        freq /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        freq = (1 - smooth) * freq / s.factor + smooth * freq;
      }
    }
    inv_freq[i] = freq;
  }
  return inv_freq;
}

}  // namespace pdserve::engine
