#include "text/jinja/lexer.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "text/byte_level.h"

namespace pdserve::text::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

absl::Status Error(int line, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", message));
}

int CountLines(absl::string_view s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

// Operators, longest first so that "**" is not read as two "*".
constexpr absl::string_view kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[",
                                            "]",  "{",  "}",  ",",  ".",  ":",  "|", "=", "<",
                                            ">",  "+",  "-",  "*",  "/",  "%",  "~"};

class Lexer {
 public:
  Lexer(absl::string_view source, const LexerOptions& options) : src_(source), options_(options) {}

  absl::StatusOr<std::vector<Token>> Run() {
    // Jinja drops one trailing newline of the template (keep_trailing_newline is off).
    if (!src_.empty() && src_.back() == '\n') src_.remove_suffix(1);
    while (pos_ < src_.size()) {
      const size_t tag = FindTag(pos_);
      std::string text(src_.substr(pos_, tag - pos_));
      // Whether this text starts a line (Jinja's line_starting: the template's start, or the
      // previous tag's match ended with a newline it consumed).
      bool line_starting = pos_ == 0;
      if (strip_next_text_) {
        const size_t keep =
            std::find_if(text.begin(), text.end(), [](char c) { return !IsSpace(c); }) -
            text.begin();
        line_starting = keep > 0 && text[keep - 1] == '\n';
        text.erase(0, keep);
      } else if (trim_next_newline_ && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
        line_starting = true;
      }
      strip_next_text_ = false;
      trim_next_newline_ = false;
      if (tag == src_.size()) {
        Emit(Token::Kind::kText, std::move(text));
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'.
      const char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (modifier == '-') {
        text.erase(
            std::find_if(text.rbegin(), text.rend(), [](char c) { return !IsSpace(c); }).base(),
            text.end());
      } else if (modifier != '+' && options_.lstrip_blocks && kind != '{') {
        // Whitespace between the line's start and a block or comment tag (and nothing else)
        // goes.
        const size_t line_start = text.rfind('\n') + 1;  // npos + 1 == 0.
        if ((line_start > 0 || line_starting) &&
            std::all_of(text.begin() + line_start, text.end(), IsSpace)) {
          text.erase(line_start);
        }
      }
      Emit(Token::Kind::kText, std::move(text));
      line_ += CountLines(src_.substr(pos_, tag - pos_));
      pos_ = tag + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      if (kind == '#') {
        RETURN_IF_ERROR(SkipComment());
      } else {
        RETURN_IF_ERROR(LexTag(kind == '{'));
      }
    }
    tokens_.push_back(Token{Token::Kind::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  // The next "{{", "{%" or "{#" at or after `from`, or the end.
  size_t FindTag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return src_.size();
  }

  void Emit(Token::Kind kind, std::string text) {
    if (kind == Token::Kind::kText && text.empty()) return;
    tokens_.push_back(Token{kind, std::move(text), line_});
  }

  // After a closing delimiter: "-" strips the following whitespace; a block or comment tag
  // eats the newline after it with trim_blocks ("+" keeps it).
  void AfterClose(char modifier, bool block) {
    if (modifier == '-') {
      strip_next_text_ = true;
    } else if (modifier != '+' && block && options_.trim_blocks) {
      trim_next_newline_ = true;
    }
  }

  absl::Status SkipComment() {
    const size_t end = src_.find("#}", pos_);
    if (end == absl::string_view::npos) return Error(line_, "unterminated comment");
    const char modifier = end > pos_ ? src_[end - 1] : '\0';
    line_ += CountLines(src_.substr(pos_, end - pos_));
    pos_ = end + 2;
    AfterClose(modifier, /*block=*/true);
    return absl::OkStatus();
  }

  absl::Status LexTag(bool expression) {
    Emit(expression ? Token::Kind::kExprOpen : Token::Kind::kStmtOpen, "");
    int depth = 0;  // Open brackets: "}}" inside a dict literal closes braces, not the tag.
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size()) return Error(line_, "unterminated tag");
      const absl::string_view rest = src_.substr(pos_);
      // The closing delimiter, possibly with a "-" or "+" modifier.
      for (char modifier : {'-', '+', '\0'}) {
        std::string close = expression ? "}}" : "%}";
        if (modifier != '\0') close.insert(close.begin(), modifier);
        if (depth == 0 && absl::StartsWith(rest, close)) {
          pos_ += close.size();
          Emit(expression ? Token::Kind::kExprClose : Token::Kind::kStmtClose, "");
          AfterClose(modifier, /*block=*/!expression);
          return absl::OkStatus();
        }
      }
      const char c = rest[0];
      if (c == '"' || c == '\'') {
        RETURN_IF_ERROR(LexString(c));
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t n = 0;
        while (n < rest.size() &&
               (std::isdigit(static_cast<unsigned char>(rest[n])) || rest[n] == '_'))
          ++n;
        bool is_float = false;
        if (n + 1 < rest.size() && rest[n] == '.' &&
            std::isdigit(static_cast<unsigned char>(rest[n + 1]))) {
          is_float = true;
          ++n;
          while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) ++n;
        }
        if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
          size_t m = n + 1;
          if (m < rest.size() && (rest[m] == '+' || rest[m] == '-')) ++m;
          if (m < rest.size() && std::isdigit(static_cast<unsigned char>(rest[m]))) {
            is_float = true;
            n = m;
            while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) ++n;
          }
        }
        std::string digits(rest.substr(0, n));
        digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
        Emit(is_float ? Token::Kind::kFloat : Token::Kind::kInt, std::move(digits));
        pos_ += n;
      } else if (IsNameStart(c)) {
        size_t n = 1;
        while (n < rest.size() && IsNameChar(rest[n])) ++n;
        Emit(Token::Kind::kName, std::string(rest.substr(0, n)));
        pos_ += n;
      } else {
        bool matched = false;
        for (absl::string_view op : kOperators) {
          if (absl::StartsWith(rest, op)) {
            if (op == "(" || op == "[" || op == "{") ++depth;
            if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
            Emit(Token::Kind::kOp, std::string(op));
            pos_ += op.size();
            matched = true;
            break;
          }
        }
        if (!matched)
          return Error(line_, absl::StrCat("unexpected character '", rest.substr(0, 1), "'"));
      }
    }
  }

  absl::Status LexString(char quote) {
    std::string out;
    size_t i = pos_ + 1;
    while (true) {
      if (i >= src_.size()) return Error(line_, "unterminated string");
      const char c = src_[i];
      if (c == quote) break;
      if (c == '\\' && i + 1 < src_.size()) {
        const char e = src_[i + 1];
        i += 2;
        switch (e) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'v':
            out += '\v';
            break;
          case '0':
            out += '\0';
            break;
          case '\\':
            out += '\\';
            break;
          case '\'':
            out += '\'';
            break;
          case '"':
            out += '"';
            break;
          case '\n':
            break;  // A backslash-newline continues the line.
          case 'x':
          case 'u':
          case 'U': {
            const size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            if (i + len > src_.size()) return Error(line_, "truncated escape in string");
            uint32_t cp = 0;
            for (size_t k = 0; k < len; ++k) {
              const char h = src_[i + k];
              if (!std::isxdigit(static_cast<unsigned char>(h)))
                return Error(line_, "bad hexadecimal escape in string");
              cp = cp * 16 + (std::isdigit(static_cast<unsigned char>(h))
                                  ? h - '0'
                                  : (std::tolower(h) - 'a' + 10));
            }
            i += len;
            if (cp > 0x10FFFF) return Error(line_, "escape beyond U+10FFFF in string");
            AppendUtf8(static_cast<int32_t>(cp), &out);
            break;
          }
          default:
            // Python keeps unknown escapes as written.
            out += '\\';
            out += e;
        }
        continue;
      }
      if (c == '\n') ++line_;
      out += c;
      ++i;
    }
    Emit(Token::Kind::kString, std::move(out));
    pos_ = i + 1;
    return absl::OkStatus();
  }

  absl::string_view src_;
  const LexerOptions options_;
  size_t pos_ = 0;
  int line_ = 1;
  bool strip_next_text_ = false;
  bool trim_next_newline_ = false;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source, const LexerOptions& options) {
  return Lexer(source, options).Run();
}

}  // namespace pdserve::text::jinja
