#include "text/pretokenizer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "re2/re2.h"
#include "text/byte_level.h"

namespace pdserve::text {
namespace {

// Unicode White_Space, as a class body: \t \n \v \f \r, U+0085, and the separators
// (Zs, Zl, Zp) which include the space and U+00A0.
const std::string kSpaceClassBody = R"(\t\n\x{0B}\f\r\x{85}\p{Z})";
const std::string kLookaheadTail = R"(\s+(?!\S)|\s+)";

bool IsUnicodeSpace(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace

absl::StatusOr<std::string> RewritePatternForRe2(absl::string_view pattern, bool* lookahead) {
  std::string source(pattern);
  *lookahead = false;
  const std::string kMarker = "\x01WS_TAIL\x01";
  const size_t tail = source.rfind(kLookaheadTail);
  if (tail != std::string::npos && tail + kLookaheadTail.size() == source.size()) {
    source.replace(tail, kLookaheadTail.size(), kMarker);
    *lookahead = true;
  }
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < source.size(); ++i) {
    const char c = source[i];
    if (source.compare(i, kMarker.size(), kMarker) == 0) {
      absl::StrAppend(&out, "([", kSpaceClassBody, "]+)");
      i += kMarker.size() - 1;
      continue;
    }
    if (c == '\\' && i + 1 < source.size()) {
      const char e = source[i + 1];
      if (e == 's') {
        if (in_class) {
          out.append(kSpaceClassBody);
        } else {
          absl::StrAppend(&out, "[", kSpaceClassBody, "]");
        }
      } else if (e == 'S') {
        if (in_class) {
          return absl::InvalidArgumentError(absl::StrCat(
              "pre-tokenizer regex: \\S inside a character class is not supported: ", pattern));
        }
        absl::StrAppend(&out, "[^", kSpaceClassBody, "]");
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
    } else if (c == ']' && in_class) {
      in_class = false;
    } else if (c == '(' && !in_class) {
      if (i + 1 < source.size() && source[i + 1] == '?') {
        if (i + 2 < source.size() &&
            (source[i + 2] == '=' || source[i + 2] == '!' || source[i + 2] == '<')) {
          return absl::InvalidArgumentError(absl::StrCat(
              "pre-tokenizer regex: lookaround '", source.substr(i, 4),
              "' is not supported except as the trailing \\s+(?!\\S)|\\s+: ", pattern));
        }
      } else {
        out.append("(?:");  // Only our whitespace group captures.
        continue;
      }
    }
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<RegexPreTokenizer>> RegexPreTokenizer::Create(
    absl::string_view pattern) {
  std::unique_ptr<RegexPreTokenizer> pre(new RegexPreTokenizer());
  auto rewritten = RewritePatternForRe2(pattern, &pre->emulate_trailing_space_lookahead_);
  if (!rewritten.ok()) return rewritten.status();
  pre->re2_pattern_ = *std::move(rewritten);
  RE2::Options options;
  options.set_encoding(RE2::Options::EncodingUTF8);
  options.set_log_errors(false);
  options.set_max_mem(64 << 20);
  pre->re_ = std::make_unique<RE2>(pre->re2_pattern_, options);
  if (!pre->re_->ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pre-tokenizer regex does not compile (", pre->re_->error(), "): ", pattern));
  }
  return pre;
}

RegexPreTokenizer::~RegexPreTokenizer() = default;

void RegexPreTokenizer::Split(absl::string_view text,
                              std::vector<absl::string_view>* pieces) const {
  const int groups = emulate_trailing_space_lookahead_ ? 2 : 1;
  const re2::StringPiece input(text.data(), text.size());
  re2::StringPiece match[2];
  size_t pos = 0;
  while (pos < text.size()) {
    if (!re_->Match(input, pos, text.size(), RE2::UNANCHORED, match, groups) || match[0].empty()) {
      pieces->push_back(text.substr(pos));  // Unmatched tail: its own piece (Isolated).
      return;
    }
    const size_t start = static_cast<size_t>(match[0].data() - text.data());
    if (start > pos) pieces->push_back(text.substr(pos, start - pos));
    size_t end = start + match[0].size();
    if (groups == 2 && match[1].data() != nullptr && match[1].size() == match[0].size() &&
        end < text.size()) {
      // `\s+(?!\S)`: give back the last space if the run has more than one code point
      // and a non-space follows (the greedy run stopped there, so one does).
      size_t p = start;
      size_t last = start;
      int count = 0;
      while (p < end) {
        last = p;
        NextCodePoint(text, &p);
        ++count;
      }
      size_t next = end;
      const int32_t following = NextCodePoint(text, &next);
      if (count > 1 && !IsUnicodeSpace(following)) end = last;
    }
    pieces->push_back(text.substr(start, end - start));
    pos = end;
  }
}

}  // namespace pdserve::text
