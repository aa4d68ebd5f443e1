// What a request asks of sampling and stopping: max_tokens, temperature, top-p, top-k, the
// seed, stop strings and token ids. A plain value the router, the wire bridge and the engine
// share; the sampler itself is engine/sampling.h.
#ifndef PDSERVE_TEXT_SAMPLING_CONFIG_H_
#define PDSERVE_TEXT_SAMPLING_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pdserve::text {

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

}  // namespace pdserve::text

#endif  // PDSERVE_TEXT_SAMPLING_CONFIG_H_
