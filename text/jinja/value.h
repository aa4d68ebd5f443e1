// Values of the Jinja subset that chat templates use (text/jinja/template.h): undefined,
// none, booleans, integers, floats, strings, lists, dicts (insertion-ordered, string keys, as
// JSON objects), namespaces (dicts whose attributes `set` may assign) and callables (builtins
// and macros). Lists and dicts are shared by reference, as in Python.
// Thread-safety: a Value is not synchronized; a template's render builds its own values.
#ifndef PDSERVE_TEXT_JINJA_VALUE_H_
#define PDSERVE_TEXT_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace pdserve::text::jinja {

class Value;

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index`, or the keyword `name`, or null when neither was given.
  const Value* Get(size_t index, absl::string_view name) const;
};

using Builtin = std::function<absl::StatusOr<Value>(const CallArgs& args)>;

struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  // A namespace(): `set ns.attr = ...` may assign its entries.
  bool is_namespace = false;

  const Value* Find(absl::string_view key) const;
  void Set(const std::string& key, Value value);
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // Undefined.
  // Undefined, with the message an error about it gives ("'x' is undefined").
  static Value Undefined(std::string hint) {
    Value v;
    v.data_ = std::move(hint);
    return v;
  }
  static Value None() { return Value(Kind::kNone); }
  Value(bool b) : kind_(Kind::kBool), data_(b) {}  // NOLINT(runtime/explicit)
  Value(int64_t i) : kind_(Kind::kInt), data_(i) {}
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double d) : kind_(Kind::kFloat), data_(d) {}
  Value(std::string s) : kind_(Kind::kString), data_(std::move(s)) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(std::vector<Value> list)
      : kind_(Kind::kList), data_(std::make_shared<std::vector<Value>>(std::move(list))) {}
  Value(std::shared_ptr<Dict> dict) : kind_(Kind::kDict), data_(std::move(dict)) {}
  static Value Callable(Builtin fn) {
    Value v(Kind::kCallable);
    v.data_ = std::make_shared<Builtin>(std::move(fn));
    return v;
  }
  static Value NewDict() { return Value(std::make_shared<Dict>()); }

  // From JSON: objects become dicts (keys in document order), arrays lists, numbers int or float.
  static Value FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  // Integers and floats (and booleans, as Python does) as a double.
  double as_double() const;
  const std::string& as_string() const { return std::get<std::string>(data_); }
  // An undefined value's error message.
  std::string undefined_hint() const {
    const std::string* hint = std::get_if<std::string>(&data_);
    return hint != nullptr && !hint->empty() ? *hint : "a value is undefined";
  }
  std::vector<Value>& list() const { return *std::get<std::shared_ptr<std::vector<Value>>>(data_); }
  Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  const Builtin& callable() const { return *std::get<std::shared_ptr<Builtin>>(data_); }

  // Python's truthiness: undefined, none, false, 0, "", [] and {} are false.
  bool Truthy() const;
  // What {{ value }} prints (Python's str(): None, True, 1.0, ['a'], {'k': 1}).
  std::string ToString() const;
  // Python's repr() (strings quoted), used inside printed lists and dicts.
  std::string Repr() const;
  // The type's name in error messages ("string", "list", ...).
  const char* TypeName() const;

  // Python equality (1 == 1.0 == True; lists and dicts element-wise).
  friend bool operator==(const Value& a, const Value& b);
  friend bool operator!=(const Value& a, const Value& b) { return !(a == b); }

 private:
  explicit Value(Kind kind) : kind_(kind) {}

  Kind kind_ = Kind::kUndefined;
  std::variant<std::monostate, bool, int64_t, double, std::string,
               std::shared_ptr<std::vector<Value>>, std::shared_ptr<Dict>, std::shared_ptr<Builtin>>
      data_;
};

// UTF-8 strings as Python sees them: sequences of code points.
std::vector<std::string> CodePoints(absl::string_view s);

}  // namespace pdserve::text::jinja

#endif  // PDSERVE_TEXT_JINJA_VALUE_H_
