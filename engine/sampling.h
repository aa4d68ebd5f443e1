// Token sampling: greedy, temperature, top-k, top-p, seeded.
// The random draw for a token depends only on the request's seed and the token's absolute
// position, so a first token sampled on a prefill worker and the rest sampled on a decode
// worker give the same stream as one process would.
// Thread-safety: SampleToken is reentrant given its own scratch.
#ifndef PDSERVE_ENGINE_SAMPLING_H_
#define PDSERVE_ENGINE_SAMPLING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace pdserve::engine {

struct SamplingConfig {
  // Tokens to generate, >= 1. Default 16.
  int max_tokens = 16;
  // 0 = greedy; otherwise >= 0. Default 1.0.
  float temperature = 1.0f;
  // In (0, 1]. Default 1.0 (disabled).
  float top_p = 1.0f;
  // 0 disables; otherwise >= 1. Default 0.
  int top_k = 0;
  // Random stream seed. Default 0.
  uint64_t seed = 0;
  // Stop strings (at most kMaxStopStrings, each at most kMaxStopBytes).
  std::vector<std::string> stop;
  // Stop token ids (at most kMaxStopTokenIds).
  std::vector<int32_t> stop_token_ids;
  // Keep going past the model's end-of-sequence tokens.
  bool ignore_eos = false;

  static constexpr int kMaxStopStrings = 16;
  static constexpr int kMaxStopBytes = 256;
  static constexpr int kMaxStopTokenIds = 64;

  bool greedy() const { return temperature == 0.0f || top_k == 1; }
  // Errors name the field and its limit, e.g. "sampling.top_p: 1.5 is outside (0, 1]".
  absl::Status Validate(int vocab_size) const;
};

struct SamplerScratch {
  std::vector<float> probs;
  std::vector<int32_t> order;
};

// Uniform double in [0, 1) for (seed, position): the stateless random stream.
double UniformForPosition(uint64_t seed, uint64_t position);

// Picks the next token from one row of logits. `position` is the absolute position the
// sampled token will occupy. Greedy ties go to the lowest id.
int32_t SampleToken(absl::Span<const float> logits, const SamplingConfig& config, uint64_t position,
                    SamplerScratch* scratch);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_SAMPLING_H_
