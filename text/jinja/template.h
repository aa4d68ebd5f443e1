// A Jinja template, parsed once and rendered many times: the subset Hugging Face chat templates
// use (see lexer.h, parser.h and builtins.h for what is supported), with the semantics of
// Python's Jinja 2 in transformers' environment (trim_blocks, lstrip_blocks, no autoescape,
// undefined values print as "" and fail when looked into). Unsupported syntax fails at Parse
// with the line; a render is bounded (output bytes, steps, macro depth) so that no input can
// make it run away.
// Thread-safety: immutable after Parse(); Render may be called concurrently.
#ifndef PDSERVE_TEXT_JINJA_TEMPLATE_H_
#define PDSERVE_TEXT_JINJA_TEMPLATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"
#include "text/jinja/value.h"

namespace pdserve::text::jinja {

struct RenderLimits {
  // Bytes of output. Default 64 MiB.
  size_t max_output_bytes = size_t{64} << 20;
  // Statements executed plus loop iterations. Default 16 M.
  int64_t max_steps = int64_t{1} << 24;
  // Nested macro calls. Default 64.
  int max_call_depth = 64;
};

class Template {
 public:
  // INVALID_ARGUMENT naming the line on a syntax error or an unsupported tag.
  static absl::StatusOr<std::unique_ptr<Template>> Parse(absl::string_view source,
                                                         const LexerOptions& options = {});

  // Renders with `variables` on top of the globals (builtins.h). Errors are INVALID_ARGUMENT
  // naming the line; an error the template raised itself (raise_exception) carries
  // kRaisedPayload and the template's message.
  absl::StatusOr<std::string> Render(const std::vector<std::pair<std::string, Value>>& variables,
                                     const RenderLimits& limits = {}) const;

 private:
  Template() = default;
  Body body_;
};

}  // namespace pdserve::text::jinja

#endif  // PDSERVE_TEXT_JINJA_TEMPLATE_H_
