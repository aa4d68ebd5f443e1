#include "common/perf_profile.h"

#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

absl::Status Positive(const char* field, double v) {
  if (!(v > 0))
    return absl::InvalidArgumentError(absl::StrCat("cost model: ", field, " must be > 0, got ", v));
  return absl::OkStatus();
}
absl::Status NonNegative(const char* field, double v) {
  if (!(v >= 0))
    return absl::InvalidArgumentError(
        absl::StrCat("cost model: ", field, " must be >= 0, got ", v));
  return absl::OkStatus();
}

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
    else if (key == "max_awaiting_kv")
      s->max_awaiting_kv = i;
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

absl::Status CostModelParams::Validate() const {
  for (auto [field, v] : {std::pair{"step.intercept_ms", step_intercept_ms},
                          std::pair{"step.per_decode_ms", step_per_decode_ms},
                          std::pair{"step.per_prefill_token_ms", step_per_prefill_token_ms},
                          std::pair{"step.per_attention_ms", step_per_attention_ms},
                          std::pair{"step.per_prefill_attention_ms", step_per_prefill_attention_ms},
                          std::pair{"prefill.overhead_ms", prefill_overhead_ms},
                          std::pair{"prefill.per_token_ms", prefill_per_token_ms},
                          std::pair{"prefill.per_token_squared_ms", prefill_per_token_squared_ms},
                          std::pair{"transfer.latency_ms", transfer_latency_ms},
                          std::pair{"offload_overhead_ms", offload_overhead_ms}}) {
    if (absl::Status s = NonNegative(field, v); !s.ok()) return s;
  }
  if (absl::Status s = Positive("transfer.bytes_per_ms", transfer_bytes_per_ms); !s.ok()) return s;
  if (absl::Status s = Positive("online.prior_variance", prior_variance); !s.ok()) return s;
  if (!(forgetting > 0.5 && forgetting <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost model: online.forgetting must be in (0.5, 1], got ", forgetting));
  }
  return absl::OkStatus();
}

double CostModelParams::PrefillPieceMs(const PrefillPiece& piece) const {
  const double end = piece.cached + piece.tokens;
  return prefill_per_token_ms * piece.tokens +
         prefill_per_token_squared_ms * (end * end - piece.cached * piece.cached);
}

double CostModelParams::PrefillBatchMs(absl::Span<const PrefillPiece> batch) const {
  double ms = prefill_overhead_ms;
  for (const PrefillPiece& piece : batch) ms += PrefillPieceMs(piece);
  return ms;
}

double CostModelParams::StepMs(const StepWork& w) const {
  return step_intercept_ms + step_per_decode_ms * w.decode +
         step_per_prefill_token_ms * w.prefill_tokens + step_per_attention_ms * w.decode_attention +
         step_per_prefill_attention_ms * w.prefill_attention;
}

absl::StatusOr<CostModelParams> ParseCostModel(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::InvalidArgumentError("cost model: not a JSON object");
  CostModelParams p;
  // Every known key, by section; anything else is a typo and an error.
  const std::map<std::string, std::map<std::string, double*>> sections = {
      {"step",
       {{"intercept_ms", &p.step_intercept_ms},
        {"per_decode_ms", &p.step_per_decode_ms},
        {"per_prefill_token_ms", &p.step_per_prefill_token_ms},
        {"per_attention_ms", &p.step_per_attention_ms},
        {"per_prefill_attention_ms", &p.step_per_prefill_attention_ms}}},
      {"prefill",
       {{"overhead_ms", &p.prefill_overhead_ms},
        {"per_token_ms", &p.prefill_per_token_ms},
        {"per_token_squared_ms", &p.prefill_per_token_squared_ms}}},
      {"transfer",
       {{"latency_ms", &p.transfer_latency_ms}, {"bytes_per_ms", &p.transfer_bytes_per_ms}}},
      {"online", {{"forgetting", &p.forgetting}, {"prior_variance", &p.prior_variance}}},
  };
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    // Free-form, and the worker shape pdserve-sim reads (deploy/profiles/roofline.py).
    if (key == "description" || key == "calibration" || key == "cluster") continue;
    if (key == "offload_overhead_ms") {
      if (!it->is_number())
        return absl::InvalidArgumentError("cost model: offload_overhead_ms must be a number");
      p.offload_overhead_ms = it->get<double>();
      continue;
    }
    auto section = sections.find(key);
    if (section == sections.end())
      return absl::InvalidArgumentError(absl::StrCat("cost model: unknown key '", key, "'"));
    if (!it->is_object())
      return absl::InvalidArgumentError(absl::StrCat("cost model: '", key, "' must be an object"));
    for (auto f = it->begin(); f != it->end(); ++f) {
      auto field = section->second.find(f.key());
      if (field == section->second.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cost model: unknown key '", key, ".", f.key(), "'"));
      }
      if (!f->is_number()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cost model: '", key, ".", f.key(), "' must be a number"));
      }
      *field->second = f->get<double>();
    }
  }
  // A profile written before chunk attention had its own coefficient prices it like decode
  // attention, as it was then.
  if (!(j.contains("step") && j["step"].contains("per_prefill_attention_ms")))
    p.step_per_prefill_attention_ms = p.step_per_attention_ms;
  if (absl::Status s = p.Validate(); !s.ok()) return s;
  return p;
}

absl::StatusOr<CostModelParams> LoadCostModel(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot open '", path, "'"));
  std::stringstream text;
  text << in.rdbuf();
  auto params = ParseCostModel(text.str());
  if (!params.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", params.status().message()));
  return params;
}

absl::Status WorkerShape::Validate() const {
  if (gpus_per_worker < 1) return Invalid("gpus_per_worker", "must be >= 1");
  if (absl::Status s = kv_layout.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cluster (KV layout): ", s.message()));
  }
  if (max_num_batched_tokens < 1) return Invalid("max_num_batched_tokens", "must be >= 1");
  if (max_num_seqs < 1) return Invalid("max_num_seqs", "must be >= 1");
  if (max_awaiting_kv < 1) return Invalid("max_awaiting_kv", "must be >= 1");
  if (max_context_tokens < 2) return Invalid("max_context_tokens", "must be >= 2");
  if (prefill_max_batch_tokens < 1) return Invalid("prefill_max_batch_tokens", "must be >= 1");
  if (prefill_kv_blocks < 0) return Invalid("prefill_kv_blocks", "must be >= 0");
  if (vocab_size < 2) return Invalid("vocab_size", "must be >= 2");
  return absl::OkStatus();
}

absl::StatusOr<PerfProfile> ParsePerfProfile(const std::string& json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::InvalidArgumentError("profile: not a JSON object");
  PerfProfile p;
  // The CPU defaults (the tiny test model's KV) until the file or flags say otherwise.
  p.shape.kv_layout.num_layers = 2;
  p.shape.kv_layout.num_kv_heads = 2;
  p.shape.kv_layout.head_dim = 16;
  p.shape.kv_layout.num_blocks = 1024;
  if (j.contains("cluster")) {
    RETURN_IF_ERROR(ApplyCluster(j["cluster"], &p.shape));
    p.has_shape = true;
  }
  ASSIGN_OR_RETURN(p.timing, ParseCostModel(json_text));
  return p;
}

absl::StatusOr<PerfProfile> LoadPerfProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--profile: cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<PerfProfile> p = ParsePerfProfile(text.str());
  if (!p.ok())
    return absl::Status(p.status().code(), absl::StrCat(path, ": ", p.status().message()));
  p->path = path;
  return p;
}

}  // namespace pdserve
