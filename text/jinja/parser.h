// Parses a token stream (text/jinja/lexer.h) into statements (text/jinja/ast.h), with
// Jinja's precedence: conditional expression < or < and < not < comparisons (chained, `in`,
// `not in`) < + - < ~ < * / // % < ** < unary - + < postfix (. [] ()) and filters/tests.
// Tags: if/elif/else, for (with `if` filter and `else`), set (names, `ns.attr`, block form),
// macro, filter, break, continue, and transformers' generation/endgeneration (no-ops).
// Thread-safety: stateless.
#ifndef PDSERVE_TEXT_JINJA_PARSER_H_
#define PDSERVE_TEXT_JINJA_PARSER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace pdserve::text::jinja {

// Errors (INVALID_ARGUMENT) name the line and what was expected.
absl::StatusOr<Body> Parse(const std::vector<Token>& tokens);

}  // namespace pdserve::text::jinja

#endif  // PDSERVE_TEXT_JINJA_PARSER_H_
