#include "text/sampling_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace pdserve::text {

absl::Status SamplingConfig::Validate(int vocab_size) const {
  if (max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.max_tokens: ", max_tokens, " must be >= 1"));
  }
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.temperature: ", temperature, " must be >= 0"));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_p: ", top_p, " is outside (0, 1]"));
  }
  if (top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_k: ", top_k, " must be 0 (disabled) or >= 1"));
  }
  if (static_cast<int>(stop.size()) > kMaxStopStrings) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.stop: ", stop.size(), " strings, at most ", kMaxStopStrings));
  }
  for (const std::string& s : stop) {
    if (s.empty() || static_cast<int>(s.size()) > kMaxStopBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling.stop: each stop string must have 1 to ", kMaxStopBytes, " bytes"));
    }
  }
  if (static_cast<int>(stop_token_ids.size()) > kMaxStopTokenIds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling.stop_token_ids: ", stop_token_ids.size(), " ids, at most ", kMaxStopTokenIds));
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling.stop_token_ids: ", id, " is outside [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace pdserve::text
