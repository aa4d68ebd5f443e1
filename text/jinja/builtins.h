// What a template's expressions can do with values, as Jinja (Python) does it: attribute and
// item lookup (with the string and dict methods templates call), slices, operators,
// comparisons, iteration, the filters and tests chat templates use, tojson as transformers
// defines it (json.dumps with ensure_ascii off), and the globals (range, namespace, dict,
// raise_exception, strftime_now).
// Errors are INVALID_ARGUMENT naming the operation and the types involved; raise_exception's
// error carries kRaisedPayload so that callers can tell a template's own refusal.
// Thread-safety: stateless.
#ifndef PDSERVE_TEXT_JINJA_BUILTINS_H_
#define PDSERVE_TEXT_JINJA_BUILTINS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/jinja/value.h"

namespace pdserve::text::jinja {

// The status payload type URL that marks an error raised by the template (raise_exception).
inline constexpr absl::string_view kRaisedPayload = "pdserve.jinja/raised";

// obj.name: methods of strings and dicts first, then a dict's entry; missing: undefined. An
// undefined obj is an error.
absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
// obj[key]: a list's or string's index (negative from the end), a dict's entry, then an
// attribute; missing: undefined.
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
// obj[start:stop:step] on lists and strings, as Python slices.
absl::StatusOr<Value> SliceValue(const Value& obj, const Value& start, const Value& stop,
                                 const Value& step);

// + - * / // % ** ~ as Python (and Jinja's ~, which concatenates strings).
absl::StatusOr<Value> BinaryOp(absl::string_view op, const Value& a, const Value& b);
// == != < <= > >= in, "not in".
absl::StatusOr<bool> Compare(absl::string_view op, const Value& a, const Value& b);
// What a for loop walks: a list's items, a dict's keys, a string's code points; undefined
// walks nothing.
absl::StatusOr<std::vector<Value>> Iterate(const Value& v);

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& value, const CallArgs& args);
absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& value, const CallArgs& args);

struct JsonOptions {
  std::optional<int> indent;
  bool sort_keys = false;
  bool ensure_ascii = false;
  // Item and key separators; default ", " and ": " (with an indent, "," and ": ").
  std::optional<std::pair<std::string, std::string>> separators;
};
absl::StatusOr<std::string> ToJsonText(const Value& v, const JsonOptions& options);

// The globals every render sees (range, namespace, dict, raise_exception, strftime_now).
std::vector<std::pair<std::string, Value>> DefaultGlobals();

}  // namespace pdserve::text::jinja

#endif  // PDSERVE_TEXT_JINJA_BUILTINS_H_
