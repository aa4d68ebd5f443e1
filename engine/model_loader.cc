#include "engine/model_loader.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/checkpoint.h"
#include "engine/cpu/cpu_model.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/device.h"
#include "engine/emulated/emulated_model.h"
#include "nlohmann/json.hpp"

namespace pdserve::engine {

namespace {

// The directory's tokenizer.json, or null without one; an error when it has more ids than
// `vocab_size`.
absl::StatusOr<std::unique_ptr<text::Tokenizer>> LoadTokenizer(const std::string& dir,
                                                               int vocab_size) {
  const std::string tokenizer_path = dir + "/tokenizer.json";
  if (!std::filesystem::exists(tokenizer_path)) return std::unique_ptr<text::Tokenizer>();
  ASSIGN_OR_RETURN(std::unique_ptr<text::Tokenizer> tokenizer,
                   text::Tokenizer::FromFile(tokenizer_path));
  if (tokenizer->vocab_size() > vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(tokenizer_path, ": tokenizer has ", tokenizer->vocab_size(),
                     " ids but the model's vocab_size is ", vocab_size));
  }
  return tokenizer;
}

// The emulated backend: config.json and the profile, no weights.
absl::StatusOr<std::unique_ptr<Model>> LoadEmulatedModel(const std::string& dir,
                                                         const EmulatedEngineOptions& options,
                                                         const text::Tokenizer* tokenizer) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir + "/config.json"));
  absl::StatusOr<ModelConfig> base = ModelConfig::FromJson(text);
  if (!base.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/config.json: ", base.status().message()));
  }
  EmulatedModelOptions emulated;
  ASSIGN_OR_RETURN(emulated.profile, LoadPerfProfile(options.profile_path));
  emulated.timing = options.timing;
  emulated.jitter = options.jitter;
  emulated.jitter_seed = options.jitter_seed;
  emulated.kv_bytes_per_token = options.kv_bytes_per_token;
  emulated.kv_dtype = options.kv_dtype;
  if (tokenizer != nullptr) {
    if (tokenizer->vocab_size() > base->vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, "/tokenizer.json: tokenizer has ", tokenizer->vocab_size(),
                       " ids but the model's vocab_size is ", base->vocab_size));
    }
    emulated.output_vocab = tokenizer->vocab_size();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<EmulatedModel> model, EmulatedModel::Create(*base, emulated));
  return std::unique_ptr<Model>(std::move(model));
}

// Name, end-of-sequence ids (config.json and generation_config.json) of a loaded model.
absl::StatusOr<LoadedModel> FinishLoading(const std::string& dir, LoadedModel loaded) {
  const ModelConfig& config = loaded.model->config();
  loaded.name = std::filesystem::path(dir).lexically_normal().filename().string();
  if (loaded.name.empty())
    loaded.name = std::filesystem::path(dir).parent_path().filename().string();
  loaded.eos_token_ids = config.eos_token_ids;

  const std::string generation_config = dir + "/generation_config.json";
  if (std::filesystem::exists(generation_config)) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(generation_config));
    const auto root = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!root.is_discarded() && root.is_object() && root.contains("eos_token_id")) {
      const auto& eos = root["eos_token_id"];
      std::vector<nlohmann::json> values = eos.is_array()
                                               ? std::vector<nlohmann::json>(eos.begin(), eos.end())
                                               : std::vector<nlohmann::json>{eos};
      for (const auto& v : values) {
        if (v.is_number_integer()) {
          const int id = v.get<int>();
          if (id >= 0 && id < config.vocab_size &&
              std::find(loaded.eos_token_ids.begin(), loaded.eos_token_ids.end(), id) ==
                  loaded.eos_token_ids.end()) {
            loaded.eos_token_ids.push_back(id);
          }
        }
      }
    }
  }
  return loaded;
}

}  // namespace

absl::Status EngineOptions::Validate() const {
  if (backend != "cpu" && backend != "cuda" && backend != "emulated") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend: '", backend, "' is not one of cpu, cuda, emulated"));
  }
  if (backend == "emulated" && emulated.profile_path.empty())
    return absl::InvalidArgumentError("--profile: required with --backend=emulated");
  if (backend != "emulated" && !emulated.profile_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--profile: only the emulated backend takes a profile (--backend is ", backend, ")"));
  }
  if (num_threads < 0 || num_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads: ", num_threads, " is outside [0, 256]"));
  }
  if (weight_dtype != "auto" && weight_dtype != "f32" && weight_dtype != "bf16" &&
      weight_dtype != "f16") {
    return absl::InvalidArgumentError(
        absl::StrCat("--weight_dtype: '", weight_dtype, "' is not one of auto, f32, bf16, f16"));
  }
  RETURN_IF_ERROR(ParseCpuIsa(cpu_isa).status());
  for (int size : cuda_graph_batch_sizes) {
    if (size < 1 || size > 1024) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cuda_graph_batch_sizes: ", size, " is outside [1, 1024]"));
    }
  }
  if (cuda_split_k_partition < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cuda_split_k_partition: ", cuda_split_k_partition, " must be >= 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadedModel> LoadModel(const std::string& dir, const EngineOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  if (options.backend == "cuda") {
    const cuda::DeviceInfo devices = cuda::ProbeDevices();
    if (devices.count == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("backend cuda: no usable GPU (", devices.reason, "); use --backend=cpu"));
    }
  }
  LoadedModel loaded;
  if (options.backend == "emulated") {
    ASSIGN_OR_RETURN(loaded.tokenizer, LoadTokenizer(dir, std::numeric_limits<int>::max()));
    ASSIGN_OR_RETURN(loaded.model,
                     LoadEmulatedModel(dir, options.emulated, loaded.tokenizer.get()));
    return FinishLoading(dir, std::move(loaded));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint, Checkpoint::Open(dir));
  if (options.backend == "cuda") {
    cuda::CudaModelOptions gpu;
    gpu.graph_batch_sizes = options.cuda_graph_batch_sizes;
    gpu.split_k_partition = options.cuda_split_k_partition;
    if (options.weight_dtype == "auto") {
      // The checkpoint's own type, as the CPU engine: bf16 and f16 stay half on the device.
      const TensorDType stored = checkpoint->DTypeOf("model.embed_tokens.weight");
      if (stored == TensorDType::kBF16) gpu.weight_dtype = DType::kBF16;
      if (stored == TensorDType::kF16) gpu.weight_dtype = DType::kF16;
    }
    if (options.weight_dtype == "bf16") gpu.weight_dtype = DType::kBF16;
    if (options.weight_dtype == "f16") gpu.weight_dtype = DType::kF16;
    ASSIGN_OR_RETURN(loaded.model, cuda::LoadCudaModel(*checkpoint, gpu));
  } else {
    CpuModelOptions cpu;
    cpu.num_threads = options.num_threads;
    ASSIGN_OR_RETURN(cpu.isa, ParseCpuIsa(options.cpu_isa));
    if (options.weight_dtype == "f32") cpu.weight_type = WeightType::kF32;
    if (options.weight_dtype == "bf16") cpu.weight_type = WeightType::kBF16;
    if (options.weight_dtype == "f16") cpu.weight_type = WeightType::kF16;
    ASSIGN_OR_RETURN(loaded.model, CpuModel::Load(*checkpoint, cpu));
  }
  ASSIGN_OR_RETURN(loaded.tokenizer, LoadTokenizer(dir, loaded.model->config().vocab_size));
  return FinishLoading(dir, std::move(loaded));
}

}  // namespace pdserve::engine
