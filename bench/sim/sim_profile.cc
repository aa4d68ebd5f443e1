#include "bench/sim/sim_profile.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace pdserve::sim {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("cluster.", field, ": ", what));
}

absl::Status ApplyCluster(const nlohmann::json& c, WorkerShape* s) {
  if (!c.is_object()) return absl::InvalidArgumentError("cluster: must be an object");
  for (auto it = c.begin(); it != c.end(); ++it) {
    const std::string& key = it.key();
    if (key == "dtype") {
      if (!it->is_string() || !ParseDType(it->get<std::string>(), &s->kv_layout.dtype))
        return Invalid(key, "must be one of f32, f16, bf16");
      continue;
    }
    if (!it->is_number_integer()) return Invalid(key, "must be an integer");
    const int64_t v = it->get<int64_t>();
    if (v < 0 || v > (int64_t{1} << 31) - 1) return Invalid(key, "out of range");
    const int i = static_cast<int>(v);
    if (key == "gpus_per_worker")
      s->gpus_per_worker = i;
    else if (key == "num_layers")
      s->kv_layout.num_layers = i;
    else if (key == "num_kv_heads")
      s->kv_layout.num_kv_heads = i;
    else if (key == "head_dim")
      s->kv_layout.head_dim = i;
    else if (key == "block_size")
      s->kv_layout.block_size = i;
    else if (key == "kv_blocks")
      s->kv_layout.num_blocks = i;
    else if (key == "max_num_batched_tokens")
      s->max_num_batched_tokens = i;
    else if (key == "max_num_seqs")
      s->max_num_seqs = i;
    else if (key == "max_context_tokens")
      s->max_context_tokens = i;
    else if (key == "prefill_max_batch_tokens")
      s->prefill_max_batch_tokens = i;
    else if (key == "prefill_kv_blocks")
      s->prefill_kv_blocks = i;
    else if (key == "vocab_size")
      s->vocab_size = i;
    else
      return absl::InvalidArgumentError(absl::StrCat("cluster: unknown key '", key, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WorkerShape::Validate() const {
  if (gpus_per_worker < 1) return Invalid("gpus_per_worker", "must be >= 1");
  if (absl::Status s = kv_layout.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cluster (KV layout): ", s.message()));
  }
  if (max_num_batched_tokens < 1) return Invalid("max_num_batched_tokens", "must be >= 1");
  if (max_num_seqs < 1) return Invalid("max_num_seqs", "must be >= 1");
  if (max_context_tokens < 2) return Invalid("max_context_tokens", "must be >= 2");
  if (prefill_max_batch_tokens < 1) return Invalid("prefill_max_batch_tokens", "must be >= 1");
  if (prefill_kv_blocks < 0) return Invalid("prefill_kv_blocks", "must be >= 0");
  if (vocab_size < 2) return Invalid("vocab_size", "must be >= 2");
  return absl::OkStatus();
}

absl::StatusOr<SimProfile> ParseSimProfile(const std::string& json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::InvalidArgumentError("profile: not a JSON object");
  SimProfile p;
  // The CPU defaults (the tiny test model's KV) until the file or flags say otherwise.
  p.shape.kv_layout.num_layers = 2;
  p.shape.kv_layout.num_kv_heads = 2;
  p.shape.kv_layout.head_dim = 16;
  p.shape.kv_layout.num_blocks = 1024;
  if (j.contains("cluster")) {
    RETURN_IF_ERROR(ApplyCluster(j["cluster"], &p.shape));
    p.has_shape = true;
  }
  ASSIGN_OR_RETURN(p.timing, router::ParseCostModel(json_text));
  return p;
}

absl::StatusOr<SimProfile> LoadSimProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("profile: cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<SimProfile> p = ParseSimProfile(text.str());
  if (!p.ok())
    return absl::Status(p.status().code(), absl::StrCat(path, ": ", p.status().message()));
  p->path = path;
  return p;
}

}  // namespace pdserve::sim
