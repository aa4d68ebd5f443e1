// Splits text into pre-tokens with a Hugging Face "Split" regex (behaviour "Isolated"), as
// the GPT-2, Llama 3 and Qwen2 tokenizers do before BPE.
//
// Those patterns are written for Oniguruma/fancy-regex; RE2 (linear time, no backtracking)
// needs two adaptations, applied when the pattern is compiled:
//  - `\s` and `\S` mean Unicode White_Space there but ASCII here, so they are rewritten to an
//    explicit class ([\t\n\v\f\r\x{85}\p{Z}]).
//  - the final `\s+(?!\S)|\s+` (a negative lookahead) becomes `(\s+)` and the lookahead is
//    emulated: a whitespace run of two or more code points that is followed by a
//    non-space gives back its last code point, which then starts the next pre-token.
// Other lookarounds are rejected with a clear error.
// Thread-safety: Split() is const and safe to call concurrently.
#ifndef PDSERVE_TEXT_PRETOKENIZER_H_
#define PDSERVE_TEXT_PRETOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace re2 {
class RE2;
}

namespace pdserve::text {

class RegexPreTokenizer {
 public:
  // GPT-2's pattern (used by ByteLevel pre-tokenizers with use_regex = true).
  static constexpr absl::string_view kGpt2Pattern =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

  static absl::StatusOr<std::unique_ptr<RegexPreTokenizer>> Create(absl::string_view pattern);
  ~RegexPreTokenizer();

  // Appends the pieces of `text` (views into it) to `pieces`.
  void Split(absl::string_view text, std::vector<absl::string_view>* pieces) const;
  const std::string& re2_pattern() const { return re2_pattern_; }

 private:
  RegexPreTokenizer() = default;
  std::unique_ptr<re2::RE2> re_;
  std::string re2_pattern_;
  bool emulate_trailing_space_lookahead_ = false;
};

// Rewrites an HF pre-tokenizer pattern for RE2 (exposed for tests). Sets *lookahead when the
// `\s+(?!\S)|\s+` tail was replaced by a capturing `(\s+)`.
absl::StatusOr<std::string> RewritePatternForRe2(absl::string_view pattern, bool* lookahead);

}  // namespace pdserve::text

#endif  // PDSERVE_TEXT_PRETOKENIZER_H_
