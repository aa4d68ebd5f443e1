// Generates one sequence alone: chunked prefill, then one decode step per token, on a
// private KV pool. This is pdserve-generate's loop and the reference the serving tests
// compare against (a sequence served in any batch must produce exactly these tokens).
// Thread-safety: one call at a time per model.
#ifndef PDSERVE_ENGINE_GENERATOR_H_
#define PDSERVE_ENGINE_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/model.h"
#include "text/generation_stream.h"
#include "text/sampling_config.h"
#include "text/tokenizer.h"

namespace pdserve::engine {

struct GenerateOptions {
  // Prompt tokens per prefill step. Default 512.
  int prefill_chunk = 512;
  int block_size = 16;
  DType kv_dtype = DType::kF32;
};

struct GeneratedSequence {
  std::vector<int32_t> tokens;
  std::string text;
  text::FinishReason finish = text::FinishReason::kNone;
  std::string stop_reason;
  absl::Duration time_to_first_token;
  absl::Duration total_time;
};

// `on_text` (optional) receives each piece of text as it is produced.
absl::StatusOr<GeneratedSequence> GenerateSingle(
    Model& model, const text::Tokenizer* tokenizer, const std::vector<int32_t>& prompt,
    const text::SamplingConfig& sampling, const std::vector<int32_t>& eos_token_ids,
    const GenerateOptions& options,
    const std::function<void(const std::string&)>& on_text = nullptr);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_GENERATOR_H_
