#include "tests/testing/test_models.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/checkpoint.h"
#include "nlohmann/json.hpp"

namespace pdserve::testing {

tools::ModelSpec TestModelSpec(const std::string& variant) {
  tools::ModelSpec spec;  // "tiny"
  spec.corpus_bytes = 200000;
  if (variant == "tiny-qwen2") {
    spec.architecture = "qwen2";
  } else if (variant == "tiny-qwen3") {
    spec.architecture = "qwen3";
  } else if (variant == "tiny-tied-bf16") {
    spec.tie_word_embeddings = true;
    spec.dtype = engine::TensorDType::kBF16;
    spec.llama3_rope_scaling = true;
  } else if (variant == "tiny-f16-sharded") {
    spec.dtype = engine::TensorDType::kF16;
    spec.shards = 3;
  } else if (variant == "micro") {
    spec.hidden_size = 64;
    spec.num_layers = 2;
    spec.num_heads = 4;
    spec.num_kv_heads = 2;
    spec.head_dim = 16;
    spec.intermediate_size = 128;
    spec.vocab_size = 512;
  }
  return spec;
}

std::string TestModelDir(const std::string& variant) {
  // $PDSERVE_TEST_MODELS_DIR where set (a carried test binary), else the build tree's.
  const char* root_env = std::getenv("PDSERVE_TEST_MODELS_DIR");
  const std::string root = root_env != nullptr && *root_env != '\0'
                               ? std::string(root_env)
                               : absl::StrCat(PDSERVE_BUILD_DIR, "/test-models");
  const std::string dir = absl::StrCat(root, "/", variant);
  std::filesystem::create_directories(root);
  const absl::Status status = tools::EnsureModel(TestModelSpec(variant), dir);
  if (!status.ok()) {
    std::fprintf(stderr, "cannot create test model %s: %s\n", dir.c_str(),
                 std::string(status.message()).c_str());
    std::abort();
  }
  return dir;
}

namespace {

// The source tree the test scripts are read from: $PDSERVE_SOURCE_DIR where set (a test binary
// carried to another machine, scripts/gpu_validate.sh), else where it was built from.
std::string SourceDir() {
  const char* dir = std::getenv("PDSERVE_SOURCE_DIR");
  return dir != nullptr && *dir != '\0' ? dir : PDSERVE_SOURCE_DIR;
}

// Runs `python script request.json output.json` and reads output.json's "logits". Exit status
// 3 (the script's "not installed") is UNAVAILABLE.
absl::StatusOr<std::vector<std::vector<double>>> RunLogitsScript(const std::string& python,
                                                                 const std::string& script,
                                                                 const nlohmann::json& request) {
  char dir_template[] = "/tmp/pdserve-ref-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string dir = dir_template;
  const std::string request_path = dir + "/request.json";
  const std::string output = dir + "/output.json";
  {
    std::ofstream out(request_path);
    out << request.dump();
  }
  const pid_t pid = fork();
  if (pid == 0) {
    execlp(python.c_str(), python.c_str(), script.c_str(), request_path.c_str(), output.c_str(),
           static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::filesystem::remove_all(dir);
    const std::string what = absl::StrCat(python, " ", script, " failed (status ", status, ")");
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3) return absl::UnavailableError(what);
    return absl::InternalError(what);
  }
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(output));
  std::filesystem::remove_all(dir);
  const auto json = nlohmann::json::parse(text);
  return json["logits"].get<std::vector<std::vector<double>>>();
}

}  // namespace

absl::StatusOr<std::vector<std::vector<double>>> ReferenceLastLogits(
    const std::string& model_dir, const std::vector<std::vector<int32_t>>& sequences,
    const std::string& weight_dtype) {
  return RunLogitsScript(
      PDSERVE_PYTHON3, absl::StrCat(SourceDir(), "/tests/engine/reference_forward.py"),
      {{"model_dir", model_dir}, {"sequences", sequences}, {"weight_dtype", weight_dtype}});
}

absl::StatusOr<std::vector<std::vector<double>>> HuggingFaceLastLogits(
    const std::string& model_dir, const std::vector<std::vector<int32_t>>& sequences) {
  const char* python = std::getenv("PDSERVE_TORCH_PYTHON");
  return RunLogitsScript(python != nullptr && *python != '\0' ? python : "python3",
                         absl::StrCat(SourceDir(), "/tests/engine/hf_reference.py"),
                         {{"model_dir", model_dir}, {"sequences", sequences}});
}

double MaxRelativeError(const std::vector<float>& ours, const std::vector<double>& reference) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < reference.size() && i < ours.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(ours[i]) - reference[i]));
    max_ref = std::max(max_ref, std::abs(reference[i]));
  }
  if (ours.size() != reference.size()) return INFINITY;
  return max_ref == 0 ? max_diff : max_diff / max_ref;
}

}  // namespace pdserve::testing
