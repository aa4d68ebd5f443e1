// pdserve-make-model: writes a Llama-architecture model with seeded random weights in the
// real Hugging Face on-disk format (safetensors + config.json + tokenizer.json).
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "common/kv_layout.h"
#include "tools/make_model/model_maker.h"

ABSL_FLAG(std::string, out, "", "Directory to write the model into (required).");
ABSL_FLAG(std::string, preset, "tiny",
          "Size preset: tiny (a few M parameters), small (~100M) or 8b (Llama-3-8B's shape, bf16, "
          "8 shards, 16 GB).");
ABSL_FLAG(std::string, architecture, "llama", "llama, qwen2 (q/k/v biases) or qwen3 (q/k norm).");
ABSL_FLAG(int, hidden_size, 0, "Override the preset's hidden size.");
ABSL_FLAG(int, num_layers, 0, "Override the preset's layer count.");
ABSL_FLAG(int, num_heads, 0, "Override the preset's attention heads.");
ABSL_FLAG(int, num_kv_heads, 0, "Override the preset's KV heads.");
ABSL_FLAG(int, head_dim, 0, "Override the preset's head dimension.");
ABSL_FLAG(int, intermediate_size, 0, "Override the preset's MLP width.");
ABSL_FLAG(int, vocab_size, 0, "Override the preset's vocabulary size (target).");
ABSL_FLAG(int, max_position_embeddings, 0, "Override the preset's context length.");
ABSL_FLAG(int, padded_vocab_size, 0,
          "Pad config.json's vocab_size and the embedding rows to this (0: the preset's).");
ABSL_FLAG(bool, tie_word_embeddings, false, "Share the embedding matrix with lm_head.");
ABSL_FLAG(bool, llama3_rope_scaling, false, "Write a Llama-3.1-style rope_scaling block.");
ABSL_FLAG(std::string, dtype, "",
          "Weight dtype on disk: f32, f16 or bf16 (default: the preset's).");
ABSL_FLAG(int, shards, 0,
          "Number of safetensors shards (> 1 writes an index file; 0: the preset's).");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the weights and the tokenizer corpus.");
ABSL_FLAG(bool, weights, true,
          "Write the weights; false: config.json, generation_config.json and the tokenizer only "
          "(for the router and --backend=emulated workers, which need no weights).");

int main(int argc, char** argv) {
  pdserve::ParseCommandLine(
      argc, argv,
      "pdserve-make-model: write a random-weight Llama-family model in Hugging Face format.\n"
      "Usage: pdserve-make-model --out=DIR [--preset=tiny|small|8b] [overrides]");
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::fprintf(stderr, "--out: required (directory to write the model into)\n");
    return 2;
  }
  auto spec = pdserve::tools::ModelSpec::Preset(absl::GetFlag(FLAGS_preset));
  if (!spec.ok()) {
    std::fprintf(stderr, "--%s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  spec->architecture = absl::GetFlag(FLAGS_architecture);
  auto override_int = [](int flag, int* field) {
    if (flag > 0) *field = flag;
  };
  override_int(absl::GetFlag(FLAGS_hidden_size), &spec->hidden_size);
  override_int(absl::GetFlag(FLAGS_num_layers), &spec->num_layers);
  override_int(absl::GetFlag(FLAGS_num_heads), &spec->num_heads);
  override_int(absl::GetFlag(FLAGS_num_kv_heads), &spec->num_kv_heads);
  override_int(absl::GetFlag(FLAGS_head_dim), &spec->head_dim);
  override_int(absl::GetFlag(FLAGS_intermediate_size), &spec->intermediate_size);
  override_int(absl::GetFlag(FLAGS_vocab_size), &spec->vocab_size);
  override_int(absl::GetFlag(FLAGS_max_position_embeddings), &spec->max_position_embeddings);
  override_int(absl::GetFlag(FLAGS_padded_vocab_size), &spec->padded_vocab_size);
  override_int(absl::GetFlag(FLAGS_shards), &spec->shards);
  spec->tie_word_embeddings |= absl::GetFlag(FLAGS_tie_word_embeddings);
  spec->llama3_rope_scaling |= absl::GetFlag(FLAGS_llama3_rope_scaling);
  spec->seed = absl::GetFlag(FLAGS_seed);
  spec->weights = absl::GetFlag(FLAGS_weights);
  if (const std::string name = absl::GetFlag(FLAGS_dtype); !name.empty()) {
    pdserve::DType dtype;
    if (!pdserve::ParseDType(name, &dtype)) {
      std::fprintf(stderr, "--dtype: '%s' is not one of f32, f16, bf16\n", name.c_str());
      return 2;
    }
    spec->dtype = dtype == pdserve::DType::kF16    ? pdserve::engine::TensorDType::kF16
                  : dtype == pdserve::DType::kBF16 ? pdserve::engine::TensorDType::kBF16
                                                   : pdserve::engine::TensorDType::kF32;
  }
  auto made = pdserve::tools::WriteModel(*spec, out);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", std::string(made.status().message()).c_str());
    return 1;
  }
  std::printf("wrote %s: %s, %.1fM parameters, vocab %d, %d layers, hidden %d\n", out.c_str(),
              spec->architecture.c_str(), made->parameters / 1e6, made->vocab_size,
              spec->num_layers, spec->hidden_size);
  return 0;
}
