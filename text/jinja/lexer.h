// Splits a template into tokens: text between tags, and the tokens inside {{ }} and {% %}
// (comments {# #} are dropped). Whitespace control is applied here, as Jinja does: "-" inside
// a tag's delimiter strips the whitespace beside it; with trim_blocks the first newline after
// a block or comment tag goes; with lstrip_blocks spaces and tabs from a line's start up to a
// block or comment tag go ("+" keeps them); a single trailing newline of the template goes.
// Thread-safety: stateless.
#ifndef PDSERVE_TEXT_JINJA_LEXER_H_
#define PDSERVE_TEXT_JINJA_LEXER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pdserve::text::jinja {

struct Token {
  enum class Kind {
    kText,       // text
    kExprOpen,   // {{
    kExprClose,  // }}
    kStmtOpen,   // {%
    kStmtClose,  // %}
    kName,       // identifier or keyword
    kInt,        // text: the digits
    kFloat,      // text: the literal
    kString,     // text: the unescaped contents
    kOp,         // text: ( ) [ ] { } , . : | = == != < <= > >= + - * / // % ** ~
    kEnd,
  };
  Kind kind;
  std::string text;
  int line = 1;
};

struct LexerOptions {
  // Both on in Hugging Face transformers' chat-template environment.
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Errors (INVALID_ARGUMENT) name the line: an unterminated tag, string or comment; a character
// that starts no token.
absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source, const LexerOptions& options);

}  // namespace pdserve::text::jinja

#endif  // PDSERVE_TEXT_JINJA_LEXER_H_
