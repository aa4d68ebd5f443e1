#include "tools/make_model/model_maker.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "engine/safetensors_writer.h"
#include "nlohmann/json.hpp"
#include "text/pretokenizer.h"
#include "tools/make_model/bpe_trainer.h"
#include "tools/make_model/corpus.h"

namespace pdserve::tools {
namespace {

using nlohmann::json;

// Llama 3's pre-tokenizer split.
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kSpecialTokens[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
                                      "<|pad|>"};
constexpr int kNumSpecial = 4;
// A plain chat template over the special tokens above (the random-weight models are not
// chat-trained; this gives chat prompts a real template to render): BOS, then each message
// as "role: content" ended by <|eot_id|>, then the assistant's turn.
constexpr const char* kChatTemplate =
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: "
    "{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  out << text;
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("write failed: ", path));
  return absl::OkStatus();
}

std::vector<float> RandomTensor(uint64_t seed, const std::string& name, size_t n, double mean,
                                double stddev) {
  SeededRandom rng(Xxh64(name, seed));
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(mean + stddev * rng.Normal());
  return v;
}

}  // namespace

absl::StatusOr<ModelSpec> ModelSpec::Preset(const std::string& name) {
  ModelSpec spec;
  if (name == "tiny") return spec;
  if (name == "small") {
    spec.hidden_size = 768;
    spec.num_layers = 14;
    spec.num_heads = 12;
    spec.num_kv_heads = 4;
    spec.head_dim = 64;
    spec.intermediate_size = 2304;
    spec.vocab_size = 4096;
    spec.max_position_embeddings = 16384;
    spec.corpus_bytes = 1500000;
    return spec;
  }
  if (name == "8b") {
    spec.hidden_size = 4096;
    spec.num_layers = 32;
    spec.num_heads = 32;
    spec.num_kv_heads = 8;
    spec.head_dim = 128;
    spec.intermediate_size = 14336;
    spec.vocab_size = 4096;
    spec.padded_vocab_size = 128256;
    spec.max_position_embeddings = 8192;
    spec.llama3_rope_scaling = true;
    spec.dtype = engine::TensorDType::kBF16;
    spec.shards = 8;
    spec.corpus_bytes = 1500000;
    return spec;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("preset: '", name, "' is not one of tiny, small, 8b"));
}

absl::Status ModelSpec::Validate() const {
  if (architecture != "llama" && architecture != "qwen2" && architecture != "qwen3") {
    return absl::InvalidArgumentError(
        absl::StrCat("architecture: '", architecture, "' is not one of llama, qwen2, qwen3"));
  }
  auto in_range = [](const char* field, int v, int lo, int hi) -> absl::Status {
    if (v < lo || v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", v, " is outside [", lo, ", ", hi, "]"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(in_range("hidden_size", hidden_size, 8, 16384));
  RETURN_IF_ERROR(in_range("num_layers", num_layers, 1, 256));
  RETURN_IF_ERROR(in_range("num_heads", num_heads, 1, 256));
  RETURN_IF_ERROR(in_range("num_kv_heads", num_kv_heads, 1, num_heads));
  RETURN_IF_ERROR(in_range("head_dim", head_dim, 2, 512));
  RETURN_IF_ERROR(in_range("intermediate_size", intermediate_size, 8, 65536));
  RETURN_IF_ERROR(in_range("vocab_size", vocab_size, 256 + kNumSpecial, 1 << 20));
  RETURN_IF_ERROR(in_range("max_position_embeddings", max_position_embeddings, 16, 1 << 20));
  RETURN_IF_ERROR(in_range("shards", shards, 1, 64));
  if (padded_vocab_size != 0)
    RETURN_IF_ERROR(in_range("padded_vocab_size", padded_vocab_size, vocab_size, 1 << 20));
  if (num_heads % num_kv_heads != 0) {
    return absl::InvalidArgumentError("num_kv_heads must divide num_heads");
  }
  if (head_dim % 2 != 0) return absl::InvalidArgumentError("head_dim must be even");
  return absl::OkStatus();
}

absl::StatusOr<MadeModel> WriteModel(const ModelSpec& spec, const std::string& dir) {
  RETURN_IF_ERROR(spec.Validate());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));

  // Tokenizer: BPE trained on the seeded corpus, then the special tokens.
  const std::string corpus = GenerateCorpus(spec.seed, spec.corpus_bytes);
  ASSIGN_OR_RETURN(TrainedBpe bpe, TrainBpe(corpus, kLlama3Pattern, spec.vocab_size - kNumSpecial));
  const int base = static_cast<int>(bpe.tokens.size());
  const int tokenizer_vocab = base + kNumSpecial;
  const int vocab = std::max(tokenizer_vocab, spec.padded_vocab_size);
  const int bos = base, eos = base + 1, eot = base + 2;
  json vocab_json = json::object();
  for (int i = 0; i < base; ++i) vocab_json[bpe.tokens[i]] = i;
  json merges_json = json::array();
  for (const auto& [a, b] : bpe.merges) merges_json.push_back({a, b});
  json added = json::array();
  for (int i = 0; i < kNumSpecial; ++i) {
    added.push_back({{"id", base + i},
                     {"content", kSpecialTokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", kLlama3Pattern}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"},
           {"add_prefix_space", false},
           {"trim_offsets", true},
           {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", kSpecialTokens[0]}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", json::array()},
        {"special_tokens",
         {{kSpecialTokens[0],
           {{"id", kSpecialTokens[0]}, {"ids", {bos}}, {"tokens", {kSpecialTokens[0]}}}}}}}},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", true},
        {"vocab", vocab_json},
        {"merges", merges_json}}}};
  RETURN_IF_ERROR(WriteText(dir + "/tokenizer.json", tokenizer.dump()));
  RETURN_IF_ERROR(WriteText(dir + "/tokenizer_config.json",
                            json({{"bos_token", kSpecialTokens[0]},
                                  {"eos_token", kSpecialTokens[1]},
                                  {"add_bos_token", true},
                                  {"chat_template", kChatTemplate},
                                  {"tokenizer_class", "PreTrainedTokenizerFast"}})
                                .dump(2)));

  // config.json.
  const bool qwen2 = spec.architecture == "qwen2";
  const bool qwen3 = spec.architecture == "qwen3";
  const char* dtype_name = spec.dtype == engine::TensorDType::kF16    ? "float16"
                           : spec.dtype == engine::TensorDType::kBF16 ? "bfloat16"
                                                                      : "float32";
  json config = {
      {"architectures",
       {qwen2   ? "Qwen2ForCausalLM"
        : qwen3 ? "Qwen3ForCausalLM"
                : "LlamaForCausalLM"}},
      {"model_type", qwen2   ? "qwen2"
                     : qwen3 ? "qwen3"
                             : "llama"},
      {"vocab_size", vocab},
      {"hidden_size", spec.hidden_size},
      {"intermediate_size", spec.intermediate_size},
      {"num_hidden_layers", spec.num_layers},
      {"num_attention_heads", spec.num_heads},
      {"num_key_value_heads", spec.num_kv_heads},
      {"head_dim", spec.head_dim},
      {"max_position_embeddings", spec.max_position_embeddings},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", spec.rope_theta},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", spec.tie_word_embeddings},
      {"attention_bias", false},
      {"bos_token_id", bos},
      {"eos_token_id", eos},
      {"torch_dtype", dtype_name},
      {"pdserve_generated", {{"seed", spec.seed}, {"generator", "pdserve-make-model"}}},
  };
  if (spec.llama3_rope_scaling) {
    config["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", 8.0},
        {"low_freq_factor", 1.0},
        {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", spec.max_position_embeddings / 4}};
  } else {
    config["rope_scaling"] = nullptr;
  }
  if (qwen2 || qwen3) config["use_sliding_window"] = false;
  RETURN_IF_ERROR(WriteText(dir + "/config.json", config.dump(2)));
  RETURN_IF_ERROR(WriteText(dir + "/generation_config.json",
                            json({{"bos_token_id", bos}, {"eos_token_id", {eos, eot}}}).dump(2)));

  // Weights: N(0, 0.02) like Hugging Face's initializer; norm weights 1 + N(0, 0.1) so a
  // missing norm multiplication would show in the reference comparison.
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    double mean, stddev;
  };
  const int64_t h = spec.hidden_size, q = spec.num_heads * spec.head_dim,
                kv = spec.num_kv_heads * spec.head_dim, inter = spec.intermediate_size;
  std::vector<Tensor> tensors = {{"model.embed_tokens.weight", {vocab, h}, 0, 0.02},
                                 {"model.norm.weight", {h}, 1, 0.1}};
  if (!spec.tie_word_embeddings) tensors.push_back({"lm_head.weight", {vocab, h}, 0, 0.02});
  for (int l = 0; l < spec.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    tensors.push_back({p + "input_layernorm.weight", {h}, 1, 0.1});
    tensors.push_back({p + "post_attention_layernorm.weight", {h}, 1, 0.1});
    tensors.push_back({p + "self_attn.q_proj.weight", {q, h}, 0, 0.02});
    tensors.push_back({p + "self_attn.k_proj.weight", {kv, h}, 0, 0.02});
    tensors.push_back({p + "self_attn.v_proj.weight", {kv, h}, 0, 0.02});
    tensors.push_back({p + "self_attn.o_proj.weight", {h, q}, 0, 0.02});
    if (qwen2) {
      tensors.push_back({p + "self_attn.q_proj.bias", {q}, 0, 0.02});
      tensors.push_back({p + "self_attn.k_proj.bias", {kv}, 0, 0.02});
      tensors.push_back({p + "self_attn.v_proj.bias", {kv}, 0, 0.02});
    }
    if (qwen3) {
      tensors.push_back({p + "self_attn.q_norm.weight", {spec.head_dim}, 1, 0.1});
      tensors.push_back({p + "self_attn.k_norm.weight", {spec.head_dim}, 1, 0.1});
    }
    tensors.push_back({p + "mlp.gate_proj.weight", {inter, h}, 0, 0.02});
    tensors.push_back({p + "mlp.up_proj.weight", {inter, h}, 0, 0.02});
    tensors.push_back({p + "mlp.down_proj.weight", {h, inter}, 0, 0.02});
  }
  MadeModel made;
  made.vocab_size = vocab;
  if (!spec.weights) {
    for (const Tensor& t : tensors) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      made.parameters += n;
    }
    return made;
  }
  std::vector<engine::SafetensorsWriter> shards(spec.shards);
  json weight_map = json::object();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    size_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    made.parameters += static_cast<int64_t>(n);
    const int shard = static_cast<int>(i * spec.shards / tensors.size());
    shards[shard].AddF32(t.name, t.shape, RandomTensor(spec.seed, t.name, n, t.mean, t.stddev),
                         spec.dtype);
    weight_map[t.name] = absl::StrFormat("model-%05d-of-%05d.safetensors", shard + 1, spec.shards);
  }
  if (spec.shards == 1) {
    shards[0].SetMetadata("format", "pt");
    RETURN_IF_ERROR(shards[0].Write(dir + "/model.safetensors"));
  } else {
    size_t total = 0;
    for (int s = 0; s < spec.shards; ++s) {
      shards[s].SetMetadata("format", "pt");
      total += shards[s].data_bytes();
      RETURN_IF_ERROR(shards[s].Write(
          dir + "/" + absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, spec.shards)));
    }
    RETURN_IF_ERROR(WriteText(
        dir + "/model.safetensors.index.json",
        json({{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}).dump(2)));
  }
  return made;
}

absl::Status EnsureModel(const ModelSpec& spec, const std::string& dir) {
  if (std::filesystem::exists(dir + "/config.json")) return absl::OkStatus();
  // Write into a temporary sibling and rename, so concurrent launchers never see half a model.
  const std::string tmp = absl::StrCat(dir, ".tmp-", getpid());
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
  RETURN_IF_ERROR(WriteModel(spec, tmp).status());
  std::filesystem::rename(tmp, dir, ec);
  if (ec && !std::filesystem::exists(dir + "/config.json")) {
    return absl::InternalError(absl::StrCat("cannot move ", tmp, " to ", dir, ": ", ec.message()));
  }
  std::filesystem::remove_all(tmp, ec);
  return absl::OkStatus();
}

}  // namespace pdserve::tools
