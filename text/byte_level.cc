#include "text/byte_level.h"

namespace pdserve::text {

int32_t NextCodePoint(absl::string_view text, size_t* pos) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  const size_t i = *pos;
  const uint8_t c = s[i];
  int len = 0;
  int32_t cp = 0;
  if (c < 0x80) {
    *pos = i + 1;
    return c;
  } else if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  } else {
    *pos = i + 1;
    return -1;
  }
  if (i + len > n) {
    *pos = i + 1;
    return -1;
  }
  for (int k = 1; k < len; ++k) {
    if ((s[i + k] & 0xC0) != 0x80) {
      *pos = i + 1;
      return -1;
    }
    cp = (cp << 6) | (s[i + k] & 0x3F);
  }
  static constexpr int32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    *pos = i + 1;
    return -1;
  }
  *pos = i + len;
  return cp;
}

void AppendUtf8(int32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  codepoint_to_byte_.fill(-1);
  // Printable bytes stand for themselves; the rest are shifted to 256, 257, ...
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const int cp = printable ? b : next++;
    AppendUtf8(cp, &byte_to_utf8_[b]);
    codepoint_to_byte_[cp] = static_cast<int16_t>(b);
  }
}

const ByteLevelAlphabet& ByteLevelAlphabet::Get() {
  static const ByteLevelAlphabet* const alphabet = new ByteLevelAlphabet();
  return *alphabet;
}

void ByteLevelAlphabet::EncodeBytes(absl::string_view bytes, std::string* out) const {
  for (char c : bytes) out->append(byte_to_utf8_[static_cast<uint8_t>(c)]);
}

bool ByteLevelAlphabet::DecodeToBytes(absl::string_view text, std::string* out) const {
  bool ok = true;
  size_t pos = 0;
  while (pos < text.size()) {
    const int32_t cp = NextCodePoint(text, &pos);
    if (cp >= 0 && cp < 512 && codepoint_to_byte_[cp] >= 0) {
      out->push_back(static_cast<char>(codepoint_to_byte_[cp]));
    } else {
      out->append("\xEF\xBF\xBD");
      ok = false;
    }
  }
  return ok;
}

}  // namespace pdserve::text
