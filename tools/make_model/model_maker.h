// Writes a Llama-architecture model with seeded random weights in the real on-disk format
// (config.json, generation_config.json, tokenizer.json, safetensors, optionally sharded):
// the embedded default model of the README commands and the fixture of the tests. The same
// loader serves real Hugging Face checkpoints.
// Thread-safety: stateless.
#ifndef PDSERVE_TOOLS_MAKE_MODEL_MODEL_MAKER_H_
#define PDSERVE_TOOLS_MAKE_MODEL_MODEL_MAKER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/safetensors.h"

namespace pdserve::tools {

struct ModelSpec {
  // "llama" (LlamaForCausalLM), "qwen2" (q/k/v biases) or "qwen3" (q/k norm).
  std::string architecture = "llama";
  int hidden_size = 256;
  int num_layers = 4;
  int num_heads = 8;
  int num_kv_heads = 2;
  int head_dim = 32;
  int intermediate_size = 768;
  // Target vocabulary including the 4 special tokens; the trained vocabulary may come out
  // smaller if the corpus runs out of pairs, and vocab_size in config.json is the real size.
  int vocab_size = 1024;
  // When larger than the trained vocabulary, config.json's vocab_size and the embedding and
  // LM-head rows are padded to it (as released models pad theirs): the shape of a large
  // vocabulary without training a tokenizer that big. 0: no padding.
  int padded_vocab_size = 0;
  int max_position_embeddings = 4096;
  double rope_theta = 500000.0;
  bool llama3_rope_scaling = false;
  bool tie_word_embeddings = false;
  engine::TensorDType dtype = engine::TensorDType::kF32;
  // Split the weights over this many safetensors shards (with an index file) when > 1.
  int shards = 1;
  uint64_t seed = 1;
  // Bytes of synthetic corpus used to train the tokenizer.
  size_t corpus_bytes = 400000;
  // False: config.json, generation_config.json and the tokenizer only, no safetensors: what
  // the router and emulated workers (--backend=emulated) serve, at any size in kilobytes.
  bool weights = true;

  // "tiny" (a few million parameters, tests), "small" (about 100M, CPU benchmarks) or "8b"
  // (Llama-3-8B's shape, bf16, 128256-row vocabulary padded from a 4096-token tokenizer: GPU
  // benchmarks; 16 GB on disk).
  static absl::StatusOr<ModelSpec> Preset(const std::string& name);
  absl::Status Validate() const;
};

struct MadeModel {
  int vocab_size = 0;
  int64_t parameters = 0;
};

// Creates `dir` (if needed) and writes the model into it.
absl::StatusOr<MadeModel> WriteModel(const ModelSpec& spec, const std::string& dir);

// Writes the model only if `dir` has no config.json yet (idempotent, for launchers).
absl::Status EnsureModel(const ModelSpec& spec, const std::string& dir);

}  // namespace pdserve::tools

#endif  // PDSERVE_TOOLS_MAKE_MODEL_MODEL_MAKER_H_
