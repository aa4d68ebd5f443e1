// A decoder-only transformer's hyperparameters, read from a Hugging Face config.json.
// Supported architectures: LlamaForCausalLM (Llama 2/3, TinyLlama; Llama-3 rope scaling),
// MistralForCausalLM (without sliding-window attention), Qwen2ForCausalLM (Qwen2/2.5: qkv
// bias), Qwen3ForCausalLM (per-head q/k RMSNorm). Anything else is a clear error.
// Thread-safety: a plain value type.
#ifndef PDSERVE_COMMON_MODEL_CONFIG_H_
#define PDSERVE_COMMON_MODEL_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/kv_layout.h"

namespace pdserve {

enum class RopeScalingType { kNone, kLinear, kLlama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;                 // Llama 3.
  double high_freq_factor = 4.0;                // Llama 3.
  int original_max_position_embeddings = 8192;  // Llama 3.
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM".
  std::string model_type;    // e.g. "llama".
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q/k/v projections have biases (Qwen2, or attention_bias).
  bool o_bias = false;    // o_proj has a bias (Llama/Qwen3 with attention_bias).
  bool mlp_bias = false;  // gate/up/down have biases (Llama with mlp_bias).
  bool qk_norm = false;   // Per-head RMSNorm on q and k before RoPE (Qwen3).
  int bos_token_id = -1;  // -1: none.
  std::vector<int> eos_token_ids;
  DType torch_dtype = DType::kF32;

  // Parses config.json text; errors name the field and the expected value.
  static absl::StatusOr<ModelConfig> FromJson(absl::string_view json_text);
  absl::Status Validate() const;

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  // Parameters including embeddings (and lm_head unless tied).
  int64_t NumParameters() const;
};

}  // namespace pdserve

#endif  // PDSERVE_COMMON_MODEL_CONFIG_H_
