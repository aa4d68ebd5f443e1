// A Hugging Face tokenizer.json tokenizer: byte-level BPE with a regex pre-tokenizer (GPT-2,
// Llama 3, Qwen2 styles), added/special tokens matched before pre-tokenization, a
// TemplateProcessing post-processor for the beginning-of-sequence token, and a ByteLevel
// decoder. Unsupported components (SentencePiece/Metaspace, byte fallback, WordPiece,
// Unigram) are rejected with an error naming the component.
// Thread-safety: immutable after FromJson(); Encode/Decode are safe to call concurrently.
#ifndef PDSERVE_TEXT_TOKENIZER_H_
#define PDSERVE_TEXT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "text/bpe.h"
#include "text/pretokenizer.h"

namespace re2 {
class RE2;
}

namespace pdserve::text {

class Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(absl::string_view json_text);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  ~Tokenizer();

  // Encodes UTF-8 text. With add_special_tokens, the post-processor's prefix (e.g. BOS) is
  // prepended. Added tokens in the text (e.g. "<|eot_id|>") become their ids.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_special_tokens = true) const;
  // Decodes ids to bytes (UTF-8 when the ids are a complete encoding). InvalidArgument for an
  // id outside the vocabulary.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     bool skip_special_tokens = true) const;
  // Appends the bytes token `id` stands for; false if `id` is unknown.
  bool AppendTokenBytes(int32_t id, bool skip_special_tokens, std::string* out) const;

  // One past the largest id (base vocabulary and added tokens).
  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> TokenToId(absl::string_view token) const;
  bool IsSpecial(int32_t id) const;
  // Ids the post-processor puts before a single sequence (e.g. {BOS}).
  const std::vector<int32_t>& prefix_ids() const { return prefix_ids_; }

 private:
  struct AddedToken {
    int32_t id;
    std::string content;
    bool special;
    bool lstrip;
    bool rstrip;
  };
  Tokenizer() = default;
  absl::Status EncodeOrdinary(absl::string_view text, std::vector<int32_t>* ids) const;

  std::unique_ptr<BpeModel> bpe_;
  std::unique_ptr<RegexPreTokenizer> pre_tokenizer_;  // Null: the whole text is one piece.
  bool add_prefix_space_ = false;
  bool normalize_nfc_ = false;            // tokenizer.json declares an NFC normalizer.
  std::vector<std::string> id_to_token_;  // Byte-level strings (base vocab).
  std::vector<std::string> id_to_bytes_;  // The bytes each base token stands for (decode).
  absl::flat_hash_map<int32_t, AddedToken> added_by_id_;
  absl::flat_hash_map<std::string, int32_t> added_by_content_;
  std::unique_ptr<re2::RE2> added_matcher_;
  std::vector<int32_t> prefix_ids_;
  int32_t vocab_size_ = 0;
};

// Writes the NFC form of `text` to `out` and returns true; false (and `out` untouched) when
// `text` is ASCII (its own NFC) or not valid UTF-8.
bool NormalizeNfc(absl::string_view text, std::string* out);

// Turns a token stream into text incrementally without ever emitting half a UTF-8 code point:
// bytes of an incomplete sequence wait for the next token; bytes that cannot start or
// continue a valid sequence become U+FFFD.
// Thread-safety: one instance per sequence.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens = true)
      : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}
  // Returns the text that became complete with this token. InvalidArgument for unknown ids.
  absl::StatusOr<std::string> Push(int32_t id);
  // The rest, with an incomplete tail replaced by U+FFFD.
  std::string Flush();
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string TakeComplete();
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace pdserve::text

#endif  // PDSERVE_TEXT_TOKENIZER_H_
