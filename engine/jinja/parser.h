// Parses a token stream (engine/jinja/lexer.h) into statements (engine/jinja/ast.h), with
// Jinja's precedence: conditional expression < or < and < not < comparisons (chained, `in`,
// `not in`) < + - < ~ < * / // % < ** < unary - + < postfix (. [] ()) and filters/tests.
// Tags: if/elif/else, for (with `if` filter and `else`), set (names, `ns.attr`, block form),
// macro, filter, break, continue, and transformers' generation/endgeneration (no-ops).
// Thread-safety: stateless.
#ifndef PDSERVE_ENGINE_JINJA_PARSER_H_
#define PDSERVE_ENGINE_JINJA_PARSER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "engine/jinja/ast.h"
#include "engine/jinja/lexer.h"

namespace pdserve::engine::jinja {

// Errors (INVALID_ARGUMENT) name the line and what was expected.
absl::StatusOr<Body> Parse(const std::vector<Token>& tokens);

}  // namespace pdserve::engine::jinja

#endif  // PDSERVE_ENGINE_JINJA_PARSER_H_
