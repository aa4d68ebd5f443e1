// Turns one sequence's sampled tokens into the text a client sees and decides when it
// stops: end-of-sequence tokens (unless ignore_eos), stop token ids, stop strings (the
// matched string is cut from the output; text that might begin a stop string is held back
// until it is ruled out), and max_tokens. Never emits half a UTF-8 code point.
// Thread-safety: one instance per sequence, used by one thread.
#ifndef PDSERVE_TEXT_GENERATION_STREAM_H_
#define PDSERVE_TEXT_GENERATION_STREAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "text/sampling_config.h"
#include "text/tokenizer.h"

namespace pdserve::text {

enum class FinishReason { kNone, kEos, kLength, kStop, kCancelled, kError };
const char* FinishReasonName(FinishReason reason);

class GenerationStream {
 public:
  // `tokenizer` may be null (token ids only; stop strings are then ignored).
  GenerationStream(const Tokenizer* tokenizer, const SamplingConfig& config,
                   std::vector<int32_t> eos_token_ids);

  struct Update {
    std::string text;  // New text to emit (may be empty).
    FinishReason finish = FinishReason::kNone;
    std::string stop_reason;  // Matched stop string, or the stop token id in decimal.
  };
  // Feeds one generated token.
  absl::StatusOr<Update> Push(int32_t token);
  // Releases held-back text when the sequence ends for an outside reason (cancel, context).
  std::string Finish();

  int generated() const { return generated_; }
  bool finished() const { return finished_; }

 private:
  size_t SafeEmitEnd() const;

  const Tokenizer* tokenizer_;
  SamplingConfig config_;
  std::vector<int32_t> eos_;
  IncrementalDetokenizer detokenizer_;
  std::string held_;  // Text not yet emitted (possible stop-string prefix).
  size_t max_stop_bytes_ = 0;
  int generated_ = 0;
  bool finished_ = false;
};

}  // namespace pdserve::text

#endif  // PDSERVE_TEXT_GENERATION_STREAM_H_
