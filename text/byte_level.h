// GPT-2's byte-level alphabet: every byte maps to one printable Unicode code point, so BPE
// vocabularies can be stored as text ("Ġ" is the space byte). Used by the GPT-2, Llama 3 and
// Qwen2 tokenizers.
// Thread-safety: the tables are immutable singletons.
#ifndef PDSERVE_TEXT_BYTE_LEVEL_H_
#define PDSERVE_TEXT_BYTE_LEVEL_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace pdserve::text {

class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& Get();

  // UTF-8 encoding of the code point that stands for `byte`.
  const std::string& Encode(uint8_t byte) const { return byte_to_utf8_[byte]; }
  // Appends the byte-level form of `bytes`.
  void EncodeBytes(absl::string_view bytes, std::string* out) const;
  // Maps byte-level text back to bytes; false if it contains a code point outside the
  // alphabet (the output then holds U+FFFD for it).
  bool DecodeToBytes(absl::string_view text, std::string* out) const;

 private:
  ByteLevelAlphabet();
  std::array<std::string, 256> byte_to_utf8_;
  std::array<int16_t, 512> codepoint_to_byte_;  // Alphabet code points are all < 512.
};

// Decodes one UTF-8 code point at `text[*pos]`, advancing *pos; returns -1 (advancing one
// byte) on an invalid sequence.
int32_t NextCodePoint(absl::string_view text, size_t* pos);
void AppendUtf8(int32_t codepoint, std::string* out);

}  // namespace pdserve::text

#endif  // PDSERVE_TEXT_BYTE_LEVEL_H_
