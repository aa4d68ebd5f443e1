// Python's str semantics for the template evaluator: the helpers the string filters share
// (strip, upper/lower, capitalize, title, split) and the methods templates call on strings
// (s.strip(), s.split(), s.startswith(), ...). Thread-safety: pure functions.
#ifndef PDSERVE_TEXT_JINJA_STRING_METHODS_H_
#define PDSERVE_TEXT_JINJA_STRING_METHODS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/jinja/value.h"

namespace pdserve::text::jinja {

// str.strip/lstrip/rstrip: `chars` null or none strips whitespace.
std::string Strip(absl::string_view s, const Value* chars, bool left, bool right);
std::string Upper(std::string s);
std::string Lower(std::string s);
std::string Capitalize(std::string s);
std::string Title(std::string s);
// str.split(sep, maxsplit): `sep` null or none splits on runs of whitespace.
Value Split(const std::string& s, const Value* sep, int64_t max_split);
// The `chars` argument of a strip call named `fn` (null when absent).
absl::StatusOr<const Value*> StripChars(const CallArgs& args, absl::string_view fn);
// s.NAME(args) for the methods IsStringMethod names.
absl::StatusOr<Value> StringMethod(const std::string& s, const std::string& name,
                                   const CallArgs& args);
bool IsStringMethod(const std::string& name);

}  // namespace pdserve::text::jinja

#endif  // PDSERVE_TEXT_JINJA_STRING_METHODS_H_
