// Loads a model directory (config.json, safetensors, tokenizer.json, optional
// generation_config.json) onto a backend chosen at start.
// Thread-safety: LoadModel is reentrant.
#ifndef PDSERVE_ENGINE_MODEL_LOADER_H_
#define PDSERVE_ENGINE_MODEL_LOADER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model.h"
#include "text/tokenizer.h"

namespace pdserve::engine {

// Backend emulated (engine/emulated/emulated_model.h): a profile's timing, no weights.
struct EmulatedEngineOptions {
  // The performance profile (a deploy/profiles/*.json or a cost_model.json). Required.
  std::string profile_path;
  // "decode" or "prefill": which of the profile's formulas times a forward (the worker's role).
  std::string timing = "decode";
  // Sigma of the log-normal factor on each step's time; 0: none. Default 0.
  double jitter = 0;
  uint64_t jitter_seed = 1;
  // K and V bytes per token over all layers (0: the least that works). Default 0.
  int64_t kv_bytes_per_token = 0;
  // The pool's element type (the worker's --kv_dtype). Default f32.
  DType kv_dtype = DType::kF32;
};

struct EngineOptions {
  // "cpu" (default), "cuda" (when built with PDSERVE_CUDA and a GPU is present) or "emulated"
  // (a profile's timing instead of a forward pass; the model directory needs only config.json
  // and tokenizer.json).
  std::string backend = "cpu";
  // Forward-pass threads including the caller; 0 = one per hardware thread. Default 0.
  int num_threads = 0;
  // How weights are kept: "auto" (the checkpoint's dtype), "f32", "bf16" or "f16". Default auto.
  std::string weight_dtype = "auto";
  // Backend cpu: the kernels' instruction set: "auto" (the best this CPU has, capped by
  // $PDSERVE_MAX_CPU_ISA when set), "avx512", "avx2" or "scalar" (cpu/cpu_isa.h). Default auto.
  std::string cpu_isa = "auto";
  // Backend cuda: decode batch sizes that replay CUDA graphs (cuda::CudaModelOptions::
  // graph_batch_sizes; each in [1, 1024]). Default none.
  std::vector<int> cuda_graph_batch_sizes;
  // Backend cuda: positions per split-K attention partition; 0 never splits. Default 512.
  int cuda_split_k_partition = 512;
  EmulatedEngineOptions emulated;

  absl::Status Validate() const;
};

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<text::Tokenizer> tokenizer;  // Null when the directory has no tokenizer.json.
  std::string name;                            // Directory base name.
  std::vector<int32_t> eos_token_ids;          // config.json + generation_config.json.
};

absl::StatusOr<LoadedModel> LoadModel(const std::string& dir, const EngineOptions& options);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_MODEL_LOADER_H_
