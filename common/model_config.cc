#include "common/model_config.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

using nlohmann::json;

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: ", field, ": ", what));
}

absl::StatusOr<int> GetInt(const json& root, const char* field, std::optional<int> fallback) {
  auto it = root.find(field);
  if (it == root.end() || it->is_null()) {
    if (fallback.has_value()) return *fallback;
    return FieldError(field, "missing (expected an integer)");
  }
  if (!it->is_number_integer()) return FieldError(field, "expected an integer");
  const int64_t v = it->get<int64_t>();
  if (v < -1 || v > (int64_t{1} << 31) - 1) return FieldError(field, "out of range");
  return static_cast<int>(v);
}

absl::StatusOr<double> GetDouble(const json& root, const char* field, double fallback) {
  auto it = root.find(field);
  if (it == root.end() || it->is_null()) return fallback;
  if (!it->is_number()) return FieldError(field, "expected a number");
  return it->get<double>();
}

absl::StatusOr<bool> GetBool(const json& root, const char* field, bool fallback) {
  auto it = root.find(field);
  if (it == root.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return FieldError(field, "expected true or false");
  return it->get<bool>();
}

absl::Status ParseRopeScaling(const json& root, RopeScaling* out) {
  auto it = root.find("rope_scaling");
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) return FieldError("rope_scaling", "expected an object or null");
  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    auto t = it->find(key);
    if (t != it->end() && t->is_string()) {
      type = t->get<std::string>();
      break;
    }
  }
  ASSIGN_OR_RETURN(out->factor, GetDouble(*it, "factor", 1.0));
  if (type == "llama3") {
    out->type = RopeScalingType::kLlama3;
    ASSIGN_OR_RETURN(out->low_freq_factor, GetDouble(*it, "low_freq_factor", 1.0));
    ASSIGN_OR_RETURN(out->high_freq_factor, GetDouble(*it, "high_freq_factor", 4.0));
    ASSIGN_OR_RETURN(out->original_max_position_embeddings,
                     GetInt(*it, "original_max_position_embeddings", 8192));
  } else if (type == "linear") {
    out->type = RopeScalingType::kLinear;
  } else if (type == "default" || type.empty()) {
    out->type = RopeScalingType::kNone;
  } else {
    return FieldError("rope_scaling.rope_type",
                      absl::StrCat("'", type, "' is not supported (supported: llama3, linear)"));
  }
  if (out->factor <= 0) return FieldError("rope_scaling.factor", "must be > 0");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::FromJson(absl::string_view json_text) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("config.json: not a JSON object");
  }
  ModelConfig c;
  auto arch = root.find("architectures");
  if (arch == root.end() || !arch->is_array() || arch->empty() || !(*arch)[0].is_string()) {
    return FieldError("architectures", "missing (expected e.g. [\"LlamaForCausalLM\"])");
  }
  c.architecture = (*arch)[0].get<std::string>();
  auto model_type = root.find("model_type");
  if (model_type != root.end() && model_type->is_string())
    c.model_type = model_type->get<std::string>();

  const bool llama = c.architecture == "LlamaForCausalLM";
  const bool mistral = c.architecture == "MistralForCausalLM";
  const bool qwen2 = c.architecture == "Qwen2ForCausalLM";
  const bool qwen3 = c.architecture == "Qwen3ForCausalLM";
  if (!llama && !mistral && !qwen2 && !qwen3) {
    return FieldError("architectures",
                      absl::StrCat("'", c.architecture,
                                   "' is not supported (supported: LlamaForCausalLM, "
                                   "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)"));
  }
  ASSIGN_OR_RETURN(c.vocab_size, GetInt(root, "vocab_size", std::nullopt));
  ASSIGN_OR_RETURN(c.hidden_size, GetInt(root, "hidden_size", std::nullopt));
  ASSIGN_OR_RETURN(c.intermediate_size, GetInt(root, "intermediate_size", std::nullopt));
  ASSIGN_OR_RETURN(c.num_layers, GetInt(root, "num_hidden_layers", std::nullopt));
  ASSIGN_OR_RETURN(c.num_heads, GetInt(root, "num_attention_heads", std::nullopt));
  ASSIGN_OR_RETURN(c.num_kv_heads, GetInt(root, "num_key_value_heads", c.num_heads));
  const int default_head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  ASSIGN_OR_RETURN(c.head_dim, GetInt(root, "head_dim", default_head_dim));
  ASSIGN_OR_RETURN(c.max_position_embeddings, GetInt(root, "max_position_embeddings", 2048));
  ASSIGN_OR_RETURN(double eps, GetDouble(root, "rms_norm_eps", 1e-6));
  c.rms_norm_eps = static_cast<float>(eps);
  ASSIGN_OR_RETURN(c.rope_theta, GetDouble(root, "rope_theta", 10000.0));
  RETURN_IF_ERROR(ParseRopeScaling(root, &c.rope_scaling));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, GetBool(root, "tie_word_embeddings", false));
  ASSIGN_OR_RETURN(bool attention_bias, GetBool(root, "attention_bias", false));
  ASSIGN_OR_RETURN(c.mlp_bias, GetBool(root, "mlp_bias", false));
  if (qwen2) {
    c.qkv_bias = true;  // Qwen2 always has q/k/v biases and never an o_proj bias.
    c.o_bias = false;
  } else {
    c.qkv_bias = attention_bias;
    c.o_bias = attention_bias;
  }
  c.qk_norm = qwen3;
  if (mistral || qwen2 || qwen3) {
    ASSIGN_OR_RETURN(bool use_sliding, GetBool(root, "use_sliding_window", mistral));
    auto window = root.find("sliding_window");
    const bool has_window = window != root.end() && !window->is_null();
    if (use_sliding && has_window) {
      return FieldError("sliding_window",
                        "sliding-window attention is not supported yet; use a checkpoint with "
                        "\"sliding_window\": null");
    }
  }
  ASSIGN_OR_RETURN(c.bos_token_id, GetInt(root, "bos_token_id", -1));
  auto eos = root.find("eos_token_id");
  if (eos != root.end() && !eos->is_null()) {
    if (eos->is_number_integer()) {
      c.eos_token_ids.push_back(eos->get<int>());
    } else if (eos->is_array()) {
      for (const json& e : *eos) {
        if (!e.is_number_integer()) return FieldError("eos_token_id", "expected integers");
        c.eos_token_ids.push_back(e.get<int>());
      }
    } else {
      return FieldError("eos_token_id", "expected an integer or a list of integers");
    }
  }
  auto dtype = root.find("torch_dtype");
  if (dtype != root.end() && dtype->is_string()) {
    DType parsed;
    if (ParseDType(dtype->get<std::string>(), &parsed)) c.torch_dtype = parsed;
  }
  RETURN_IF_ERROR(c.Validate());
  return c;
}

absl::Status ModelConfig::Validate() const {
  auto positive = [](const char* field, int v) -> absl::Status {
    if (v <= 0) return FieldError(field, absl::StrCat(v, " must be > 0"));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  RETURN_IF_ERROR(positive("hidden_size", hidden_size));
  RETURN_IF_ERROR(positive("intermediate_size", intermediate_size));
  RETURN_IF_ERROR(positive("num_hidden_layers", num_layers));
  RETURN_IF_ERROR(positive("num_attention_heads", num_heads));
  RETURN_IF_ERROR(positive("num_key_value_heads", num_kv_heads));
  RETURN_IF_ERROR(positive("head_dim", head_dim));
  RETURN_IF_ERROR(positive("max_position_embeddings", max_position_embeddings));
  // Upper bounds well above any real model: a config.json with absurd dimensions is an error
  // here rather than a std::length_error (an abort) when buffers are sized from it.
  auto at_most = [](const char* field, int v, int limit) -> absl::Status {
    if (v > limit) return FieldError(field, absl::StrCat(v, " exceeds ", limit));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(at_most("vocab_size", vocab_size, 1 << 22));
  RETURN_IF_ERROR(at_most("hidden_size", hidden_size, 1 << 16));
  RETURN_IF_ERROR(at_most("intermediate_size", intermediate_size, 1 << 19));
  RETURN_IF_ERROR(at_most("num_hidden_layers", num_layers, 1024));
  RETURN_IF_ERROR(at_most("num_attention_heads", num_heads, 1024));
  RETURN_IF_ERROR(at_most("max_position_embeddings", max_position_embeddings, 1 << 24));
  if (num_heads % num_kv_heads != 0) {
    return FieldError("num_key_value_heads",
                      absl::StrCat(num_kv_heads, " must divide num_attention_heads ", num_heads));
  }
  if (head_dim % 2 != 0) return FieldError("head_dim", absl::StrCat(head_dim, " must be even"));
  if (head_dim > 512) return FieldError("head_dim", absl::StrCat(head_dim, " exceeds 512"));
  if (rms_norm_eps <= 0) return FieldError("rms_norm_eps", "must be > 0");
  if (rope_theta <= 0) return FieldError("rope_theta", "must be > 0");
  for (int eos : eos_token_ids) {
    if (eos < 0 || eos >= vocab_size) {
      return FieldError("eos_token_id", absl::StrCat(eos, " is outside [0, ", vocab_size, ")"));
    }
  }
  if (bos_token_id >= vocab_size) {
    return FieldError("bos_token_id",
                      absl::StrCat(bos_token_id, " is outside [0, ", vocab_size, ")"));
  }
  return absl::OkStatus();
}

int64_t ModelConfig::NumParameters() const {
  const int64_t h = hidden_size;
  int64_t per_layer =
      h * q_dim() + 2 * h * kv_dim() + q_dim() * h + 3 * h * intermediate_size + 2 * h;
  if (qkv_bias) per_layer += q_dim() + 2 * kv_dim();
  if (qk_norm) per_layer += 2 * head_dim;
  int64_t total = per_layer * num_layers + int64_t{vocab_size} * h + h;
  if (!tie_word_embeddings) total += int64_t{vocab_size} * h;
  return total;
}

}  // namespace pdserve
