#include "text/jinja/builtins.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <ctime>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "text/jinja/errors.h"
#include "text/jinja/int_arith.h"
#include "text/jinja/string_methods.h"

namespace pdserve::text::jinja {
namespace {

absl::StatusOr<Value> DictMethod(const Value& dict, const std::string& name, const CallArgs& args) {
  const Dict& d = dict.dict();
  if (name == "items") {
    std::vector<Value> items;
    for (const auto& [key, value] : d.entries) items.emplace_back(std::vector<Value>{key, value});
    return Value(std::move(items));
  }
  if (name == "keys") {
    std::vector<Value> keys;
    for (const auto& entry : d.entries) keys.emplace_back(entry.first);
    return Value(std::move(keys));
  }
  if (name == "values") {
    std::vector<Value> values;
    for (const auto& entry : d.entries) values.push_back(entry.second);
    return Value(std::move(values));
  }
  if (name == "get") {
    const Value* key = args.Get(0, "key");
    if (key == nullptr || !key->is_string()) return Error("get: the key must be a string");
    const Value* found = d.Find(key->as_string());
    if (found != nullptr) return *found;
    const Value* fallback = args.Get(1, "default");
    return fallback != nullptr ? *fallback : Value::None();
  }
  return Error(absl::StrCat("dict has no method '", name, "'"));
}

bool IsDictMethod(const std::string& name) {
  return name == "items" || name == "keys" || name == "values" || name == "get";
}

// A bound method: the object is copied into the callable (lists and dicts by reference).
Value Bind(Value obj, std::string name) {
  return Value::Callable([obj = std::move(obj), name = std::move(name)](const CallArgs& args) {
    if (obj.is_string()) return StringMethod(obj.as_string(), name, args);
    return DictMethod(obj, name, args);
  });
}

int64_t Length(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(CodePoints(v.as_string()).size());
  if (v.is_list()) return static_cast<int64_t>(v.list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.dict().entries.size());
  return 0;
}

// Python's ordering of two values of comparable types (numbers, strings, lists).
absl::StatusOr<int> Order(const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string())
    return a.as_string().compare(b.as_string()) < 0 ? -1 : a.as_string() > b.as_string();
  if (a.is_list() && b.is_list()) {
    const auto& x = a.list();
    const auto& y = b.list();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      ASSIGN_OR_RETURN(int o, Order(x[i], y[i]));
      if (o != 0) return o;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  return Error(absl::StrCat("cannot order a ", a.TypeName(), " and a ", b.TypeName()));
}

absl::StatusOr<int64_t> IntArg(const Value* v, absl::string_view what, int64_t fallback) {
  if (v == nullptr || v->is_none() || v->is_undefined()) return fallback;
  if (!v->is_int()) return Error(absl::StrCat(what, " must be an integer"));
  return v->as_int();
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t times) {
  // An empty sequence repeated any number of times is empty, at once (not after 10^10 empty
  // appends, which jinja_template_fuzzer found).
  if (Length(seq) == 0) times = 0;
  times = std::max<int64_t>(times, 0);
  if (times > 0 && Length(seq) > kMaxSequence / times)
    return Error("sequence repetition too large");
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return Value(std::move(out));
}

absl::StatusOr<Value> Attribute(const Value& item, const Value* attribute) {
  if (attribute == nullptr || !attribute->is_string()) return Error("attribute must be a string");
  // "a.b" walks nested attributes, as Jinja's make_attrgetter does.
  Value v = item;
  for (absl::string_view part : absl::StrSplit(attribute->as_string(), '.')) {
    ASSIGN_OR_RETURN(v, GetItem(v, Value(std::string(part))));
  }
  return v;
}

// select/reject/selectattr/rejectattr: keep items whose test (default: truthiness) passes.
absl::StatusOr<Value> FilterItems(const Value& value, const CallArgs& args, bool by_attribute,
                                  bool keep) {
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  size_t first_arg = 0;
  const Value* attribute = nullptr;
  if (by_attribute) {
    attribute = args.Get(0, "attribute");
    first_arg = 1;
  }
  const Value* test = args.positional.size() > first_arg ? &args.positional[first_arg] : nullptr;
  if (test != nullptr && !test->is_string()) return Error("select: the test name must be a string");
  CallArgs test_args;
  for (size_t i = first_arg + 1; i < args.positional.size(); ++i)
    test_args.positional.push_back(args.positional[i]);
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attribute) {
      ASSIGN_OR_RETURN(subject, Attribute(item, attribute));
    }
    bool passed;
    if (test == nullptr) {
      passed = subject.Truthy();
    } else {
      ASSIGN_OR_RETURN(passed, ApplyTest(test->as_string(), subject, test_args));
    }
    if (passed == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

absl::StatusOr<std::vector<Value>> SortedItems(const Value& value, const CallArgs& args) {
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  const Value* reverse = args.Get(0, "reverse");
  const Value* case_sensitive = args.Get(1, "case_sensitive");
  const Value* attribute = args.Get(2, "attribute");
  const bool fold = case_sensitive == nullptr || !case_sensitive->Truthy();
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    Value key = item;
    if (attribute != nullptr && !attribute->is_none()) {
      ASSIGN_OR_RETURN(key, Attribute(item, attribute));
    }
    if (fold && key.is_string()) key = Value(Lower(key.as_string()));
    keyed.emplace_back(std::move(key), item);
  }
  absl::Status failure;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    absl::StatusOr<int> o = Order(a.first, b.first);
    if (!o.ok()) {
      failure = o.status();
      return false;
    }
    return *o < 0;
  });
  RETURN_IF_ERROR(failure);
  std::vector<Value> out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  if (reverse != nullptr && reverse->Truthy()) std::reverse(out.begin(), out.end());
  return out;
}

absl::StatusOr<Value> Indent(const std::string& s, const CallArgs& args) {
  const Value* width = args.Get(0, "width");
  std::string prefix;
  if (width == nullptr || width->is_int()) {
    const int64_t spaces = width == nullptr ? 4 : std::max<int64_t>(width->as_int(), 0);
    if (spaces > kMaxSequence) return Error(absl::StrCat("indent: width ", spaces, " too large"));
    prefix.assign(static_cast<size_t>(spaces), ' ');
  } else if (width->is_string()) {
    prefix = width->as_string();
  } else {
    return Error("indent: width must be an integer or a string");
  }
  const Value* first = args.Get(1, "first");
  const Value* blank = args.Get(2, "blank");
  std::vector<std::string> lines = absl::StrSplit(s, '\n');
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    const bool indent = (i > 0 || (first != nullptr && first->Truthy())) &&
                        (!lines[i].empty() || (blank != nullptr && blank->Truthy()));
    if (indent) out += prefix;
    out += lines[i];
    RETURN_IF_ERROR(CheckBuiltString(out, "indent"));
  }
  return Value(std::move(out));
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return Error(obj.undefined_hint());
  if (obj.is_dict()) {
    const Dict& d = obj.dict();
    if (!d.is_namespace && IsDictMethod(name)) return Bind(obj, name);
    if (const Value* v = d.Find(name)) return *v;
    return Value::Undefined(absl::StrCat("'dict object' has no attribute '", name, "'"));
  }
  if (obj.is_string() && IsStringMethod(name)) return Bind(obj, name);
  return Value::Undefined(
      absl::StrCat("'", obj.TypeName(), " object' has no attribute '", name, "'"));
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return Error(obj.undefined_hint());
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.is_int() ? key.as_int() : key.as_bool();
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined("list index out of range");
      return obj.list()[static_cast<size_t>(i)];
    }
    const std::vector<std::string> cps = CodePoints(obj.as_string());
    const int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::Undefined("string index out of range");
    return Value(cps[static_cast<size_t>(i)]);
  }
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.dict().Find(key.as_string())) return *v;
  }
  if (key.is_string()) return GetAttr(obj, key.as_string());
  return Value::Undefined(absl::StrCat("'", obj.TypeName(), " object' has no item ", key.Repr()));
}

absl::StatusOr<Value> SliceValue(const Value& obj, const Value& start_v, const Value& stop_v,
                                 const Value& step_v) {
  if (!obj.is_list() && !obj.is_string()) return TypeError("slice", obj);
  std::vector<Value> items;
  std::vector<std::string> cps;
  if (obj.is_list()) {
    items = obj.list();
  } else {
    cps = CodePoints(obj.as_string());
  }
  const int64_t n = static_cast<int64_t>(obj.is_list() ? items.size() : cps.size());
  ASSIGN_OR_RETURN(int64_t step, IntArg(&step_v, "slice step", 1));
  if (step == 0) return Error("slice step cannot be zero");
  auto bound = [&](const Value& v, int64_t fallback) -> absl::StatusOr<int64_t> {
    ASSIGN_OR_RETURN(int64_t i, IntArg(&v, "slice index", fallback));
    if (v.is_none() || v.is_undefined()) return fallback;
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  ASSIGN_OR_RETURN(int64_t start, bound(start_v, step > 0 ? 0 : n - 1));
  ASSIGN_OR_RETURN(int64_t stop, bound(stop_v, step > 0 ? n : -1));
  std::vector<Value> out_items;
  std::string out_string;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (obj.is_list()) {
      out_items.push_back(items[static_cast<size_t>(i)]);
    } else {
      out_string += cps[static_cast<size_t>(i)];
    }
    if (__builtin_add_overflow(i, step, &i)) break;  // Past either end too.
  }
  if (obj.is_list()) return Value(std::move(out_items));
  return Value(std::move(out_string));
}

absl::StatusOr<Value> BinaryOp(absl::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.ToString() + b.ToString());
  const bool numbers = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
  const bool ints = numbers && !a.is_float() && !b.is_float();
  auto as_int = [](const Value& v) { return v.is_int() ? v.as_int() : int64_t{v.as_bool()}; };
  int64_t int_result = 0;
  if (op == "+") {
    if (ints) {
      if (__builtin_add_overflow(as_int(a), as_int(b), &int_result))
        return IntOverflow(op, as_int(a), as_int(b));
      return Value(int_result);
    }
    if (numbers) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list()) {
      std::vector<Value> out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return Value(std::move(out));
    }
  } else if (op == "-") {
    if (ints) {
      if (__builtin_sub_overflow(as_int(a), as_int(b), &int_result))
        return IntOverflow(op, as_int(a), as_int(b));
      return Value(int_result);
    }
    if (numbers) return Value(a.as_double() - b.as_double());
  } else if (op == "*") {
    if (ints) {
      if (__builtin_mul_overflow(as_int(a), as_int(b), &int_result))
        return IntOverflow(op, as_int(a), as_int(b));
      return Value(int_result);
    }
    if (numbers) return Value(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && b.is_int()) return Repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && a.is_int()) return Repeat(b, a.as_int());
  } else if (op == "/") {
    if (numbers) {
      if (b.as_double() == 0) return Error("division by zero");
      return Value(a.as_double() / b.as_double());
    }
  } else if (op == "//" || op == "%") {
    if (numbers) {
      if (b.as_double() == 0) return Error("integer division or modulo by zero");
      if (ints) {
        if (op == "%") return Value(FloorMod(as_int(a), as_int(b)));
        ASSIGN_OR_RETURN(const int64_t q, FloorDiv(as_int(a), as_int(b)));
        return Value(q);
      }
      const double q = std::floor(a.as_double() / b.as_double());
      return Value(op == "//" ? q : a.as_double() - q * b.as_double());
    }
  } else if (op == "**") {
    if (ints && as_int(b) >= 0) {
      ASSIGN_OR_RETURN(const int64_t r, CheckedPow(as_int(a), as_int(b)));
      return Value(r);
    }
    if (numbers) return Value(std::pow(a.as_double(), b.as_double()));
  }
  if (a.is_undefined() || b.is_undefined()) {
    return Error((a.is_undefined() ? a : b).undefined_hint());
  }
  return Error(absl::StrCat("unsupported operand types for ", op, ": ", a.TypeName(), " and ",
                            b.TypeName()));
}

absl::StatusOr<bool> Compare(absl::string_view op, const Value& a, const Value& b) {
  if (op == "==") return a == b;
  if (op == "!=") return a != b;
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string())
        return Error(absl::StrCat("'in <string>' requires a string, not a ", a.TypeName()));
      found = b.as_string().find(a.as_string()) != std::string::npos;
    } else if (b.is_list()) {
      found = std::find(b.list().begin(), b.list().end(), a) != b.list().end();
    } else if (b.is_dict()) {
      found = a.is_string() && b.dict().Find(a.as_string()) != nullptr;
    } else if (b.is_undefined()) {
      return Error(b.undefined_hint());
    } else {
      return Error(absl::StrCat("argument of type ", b.TypeName(), " is not iterable"));
    }
    return op == "in" ? found : !found;
  }
  ASSIGN_OR_RETURN(int order, Order(a, b));
  if (op == "<") return order < 0;
  if (op == "<=") return order <= 0;
  if (op == ">") return order > 0;
  if (op == ">=") return order >= 0;
  return Error(absl::StrCat("unknown comparison ", op));
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kList:
      return v.list();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& entry : v.dict().entries) keys.emplace_back(entry.first);
      return keys;
    }
    case Value::Kind::kString: {
      if (static_cast<int64_t>(v.as_string().size()) > kMaxSequence) {
        return Error(absl::StrCat("iterating a string of ", v.as_string().size(),
                                  " bytes (at most ", kMaxSequence, ")"));
      }
      std::vector<Value> out;
      for (std::string& cp : CodePoints(v.as_string())) out.emplace_back(std::move(cp));
      return out;
    }
    default:
      return Error(absl::StrCat("value of type ", v.TypeName(), " is not iterable"));
  }
}

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& value,
                                  const CallArgs& args) {
  if (name == "length" || name == "count") {
    if (!value.is_string() && !value.is_list() && !value.is_dict() && !value.is_undefined())
      return TypeError("length", value);
    return Value(Length(value));
  }
  if (name == "tojson") {
    JsonOptions options;
    if (const Value* indent = args.Get(0, "indent"); indent != nullptr && !indent->is_none()) {
      if (!indent->is_int()) return Error("tojson: indent must be an integer");
      // Python's json.dumps treats a negative indent as 0 (newlines, no spaces).
      const int64_t spaces = std::max<int64_t>(indent->as_int(), 0);
      if (spaces > 1024) return Error(absl::StrCat("tojson: indent ", spaces, " too large"));
      options.indent = static_cast<int>(spaces);
    }
    if (const Value* sort = args.Get(99, "sort_keys")) options.sort_keys = sort->Truthy();
    if (const Value* ascii = args.Get(99, "ensure_ascii")) options.ensure_ascii = ascii->Truthy();
    if (const Value* seps = args.Get(99, "separators"); seps != nullptr && seps->is_list()) {
      if (seps->list().size() != 2 || !seps->list()[0].is_string() || !seps->list()[1].is_string())
        return Error("tojson: separators must be two strings");
      options.separators = std::make_pair(seps->list()[0].as_string(), seps->list()[1].as_string());
    }
    ASSIGN_OR_RETURN(std::string text, ToJsonText(value, options));
    return Value(std::move(text));
  }
  if (name == "default" || name == "d") {
    const Value* fallback = args.Get(0, "default_value");
    const Value* boolean = args.Get(1, "boolean");
    const bool use_fallback =
        value.is_undefined() || (boolean != nullptr && boolean->Truthy() && !value.Truthy());
    if (use_fallback) return fallback != nullptr ? *fallback : Value(std::string());
    return value;
  }
  if (name == "safe") return value;
  if (name == "string") return Value(value.ToString());
  if (name == "list") {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    return Value(std::move(items));
  }
  if (name == "items") {
    if (value.is_undefined()) return Value(std::vector<Value>());
    if (!value.is_dict()) return TypeError("items", value);
    return DictMethod(value, "items", CallArgs());
  }
  if (name == "first" || name == "last") {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    if (items.empty()) return Value::Undefined("no first or last item of an empty sequence");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (value.is_string()) {
      std::vector<std::string> cps = CodePoints(value.as_string());
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return Value(std::move(out));
    }
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "join") {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    const Value* sep = args.Get(0, "d");
    const Value* attribute = args.Get(1, "attribute");
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0 && sep != nullptr) out += sep->ToString();
      Value item = items[i];
      if (attribute != nullptr) {
        ASSIGN_OR_RETURN(item, Attribute(item, attribute));
      }
      out += item.ToString();
      RETURN_IF_ERROR(CheckBuiltString(out, "join"));
    }
    return Value(std::move(out));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "trim") {
    if (!value.is_string()) {
      if (value.is_undefined()) return Value(std::string());
      return TypeError(name, value);
    }
    if (name == "upper") return Value(Upper(value.as_string()));
    if (name == "lower") return Value(Lower(value.as_string()));
    if (name == "title") return Value(Title(value.as_string()));
    if (name == "capitalize") return Value(Capitalize(value.as_string()));
    ASSIGN_OR_RETURN(const Value* chars, StripChars(args, "trim"));
    return Value(Strip(value.as_string(), chars, true, true));
  }
  if (name == "replace") {
    if (!value.is_string()) return TypeError("replace", value);
    CallArgs method_args = args;
    return StringMethod(value.as_string(), "replace", method_args);
  }
  if (name == "indent") {
    if (!value.is_string()) return TypeError("indent", value);
    return Indent(value.as_string(), args);
  }
  if (name == "escape" || name == "e" || name == "forceescape") {
    return Value(HtmlEscape(value.ToString()));
  }
  if (name == "int") {
    const Value* fallback = args.Get(0, "default");
    if (value.is_int()) return value;
    if (value.is_bool()) return Value(int64_t{value.as_bool()});
    if (value.is_float()) return Truncate(value.as_double());
    if (value.is_string()) {
      char* end = nullptr;
      const std::string s = Strip(value.as_string(), nullptr, true, true);
      errno = 0;
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end != nullptr && *end == '\0') {
        if (errno == ERANGE) return Error(absl::StrCat("int: ", s, " does not fit in 64 bits"));
        return Value(static_cast<int64_t>(v));
      }
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end != nullptr && *end == '\0') return Truncate(d);
    }
    return fallback != nullptr ? *fallback : Value(int64_t{0});
  }
  if (name == "float") {
    if (value.is_number() || value.is_bool()) return Value(value.as_double());
    if (value.is_string()) {
      char* end = nullptr;
      const std::string s = Strip(value.as_string(), nullptr, true, true);
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end != nullptr && *end == '\0') return Value(d);
    }
    const Value* fallback = args.Get(0, "default");
    return fallback != nullptr ? *fallback : Value(0.0);
  }
  if (name == "abs") {
    if (value.is_int()) {
      if (value.as_int() == std::numeric_limits<int64_t>::min())
        return Error("integer overflow: abs of the smallest 64-bit integer");
      return Value(value.as_int() < 0 ? -value.as_int() : value.as_int());
    }
    if (value.is_float()) return Value(std::fabs(value.as_double()));
    return TypeError("abs", value);
  }
  if (name == "round") {
    if (!value.is_number()) return TypeError("round", value);
    ASSIGN_OR_RETURN(int64_t precision, IntArg(args.Get(0, "precision"), "round: precision", 0));
    const Value* method = args.Get(1, "method");
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = value.as_double() * scale;
    double r = std::round(x);
    if (method != nullptr && method->is_string() && method->as_string() == "floor")
      r = std::floor(x);
    if (method != nullptr && method->is_string() && method->as_string() == "ceil") r = std::ceil(x);
    return Value(r / scale);
  }
  if (name == "sum") {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    const Value* attribute = args.Get(0, "attribute");
    const Value* start = args.Get(1, "start");
    Value total = start != nullptr ? *start : Value(int64_t{0});
    for (const Value& item : items) {
      Value v = item;
      if (attribute != nullptr && !attribute->is_none()) {
        ASSIGN_OR_RETURN(v, Attribute(item, attribute));
      }
      ASSIGN_OR_RETURN(total, BinaryOp("+", total, v));
    }
    return total;
  }
  if (name == "min" || name == "max") {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    if (items.empty()) return Value::Undefined("no min or max of an empty sequence");
    Value best = items[0];
    for (size_t i = 1; i < items.size(); ++i) {
      ASSIGN_OR_RETURN(int o, Order(items[i], best));
      if (name == "min" ? o < 0 : o > 0) best = items[i];
    }
    return best;
  }
  if (name == "unique") {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    std::vector<Value> out;
    for (const Value& item : items) {
      if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
    }
    return Value(std::move(out));
  }
  if (name == "sort") {
    ASSIGN_OR_RETURN(std::vector<Value> items, SortedItems(value, args));
    return Value(std::move(items));
  }
  if (name == "dictsort") {
    if (!value.is_dict()) return TypeError("dictsort", value);
    ASSIGN_OR_RETURN(Value items, DictMethod(value, "items", CallArgs()));
    CallArgs sort_args;
    sort_args.keyword.emplace_back("attribute", Value("0"));
    if (const Value* reverse = args.Get(2, "reverse"))
      sort_args.keyword.emplace_back("reverse", *reverse);
    if (const Value* cs = args.Get(0, "case_sensitive"))
      sort_args.keyword.emplace_back("case_sensitive", *cs);
    ASSIGN_OR_RETURN(std::vector<Value> sorted, SortedItems(items, sort_args));
    return Value(std::move(sorted));
  }
  if (name == "select" || name == "reject")
    return FilterItems(value, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr")
    return FilterItems(value, args, true, name == "selectattr");
  if (name == "map") {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    std::vector<Value> out;
    if (const Value* attribute = args.Get(99, "attribute")) {
      const Value* fallback = args.Get(99, "default");
      for (const Value& item : items) {
        ASSIGN_OR_RETURN(Value v, Attribute(item, attribute));
        out.push_back(v.is_undefined() && fallback != nullptr ? *fallback : v);
      }
      return Value(std::move(out));
    }
    if (args.positional.empty() || !args.positional[0].is_string())
      return Error("map: a filter name or attribute= is required");
    CallArgs filter_args;
    filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
    filter_args.keyword = args.keyword;
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value v, ApplyFilter(args.positional[0].as_string(), item, filter_args));
      out.push_back(std::move(v));
    }
    return Value(std::move(out));
  }
  if (name == "attr") {
    const Value* attribute = args.Get(0, "name");
    if (attribute == nullptr || !attribute->is_string())
      return Error("attr: the name must be a string");
    return GetAttr(value, attribute->as_string());
  }
  if (name == "wordcount") {
    return Value(static_cast<int64_t>(Split(value.ToString(), nullptr, -1).list().size()));
  }
  return Error(absl::StrCat("unknown filter '", name, "'"));
}

absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& value, const CallArgs& args) {
  const Value* arg = args.Get(0, "other");
  auto need_arg = [&]() -> absl::Status {
    if (arg == nullptr) return Error(absl::StrCat("test '", name, "' needs an argument"));
    return absl::OkStatus();
  };
  if (name == "defined") return !value.is_undefined();
  if (name == "undefined") return value.is_undefined();
  if (name == "none") return value.is_none();
  if (name == "string") return value.is_string();
  if (name == "number") return value.is_number();
  if (name == "integer") return value.is_int();
  if (name == "float") return value.is_float();
  if (name == "boolean") return value.is_bool();
  if (name == "true") return value.is_bool() && value.as_bool();
  if (name == "false") return value.is_bool() && !value.as_bool();
  if (name == "mapping") return value.is_dict();
  if (name == "iterable") return value.is_list() || value.is_dict() || value.is_string();
  if (name == "sequence") return value.is_list() || value.is_dict() || value.is_string();
  if (name == "callable") return value.is_callable();
  if (name == "lower") return value.is_string() && Lower(value.as_string()) == value.as_string();
  if (name == "upper") return value.is_string() && Upper(value.as_string()) == value.as_string();
  if (name == "odd" || name == "even") {
    if (!value.is_int()) return TypeError(std::string(name), value);
    const bool even = value.as_int() % 2 == 0;
    return name == "even" ? even : !even;
  }
  if (name == "divisibleby") {
    RETURN_IF_ERROR(need_arg());
    if (!value.is_int() || !arg->is_int() || arg->as_int() == 0)
      return Error("divisibleby: needs non-zero integers");
    return FloorMod(value.as_int(), arg->as_int()) == 0;
  }
  if (name == "sameas") {
    RETURN_IF_ERROR(need_arg());
    if (value.kind() != arg->kind()) return false;
    if (value.is_list()) return &value.list() == &arg->list();
    if (value.is_dict()) return &value.dict() == &arg->dict();
    return value == *arg;
  }
  static const std::pair<const char*, const char*> kComparisons[] = {
      {"eq", "=="}, {"equalto", "=="}, {"==", "=="},      {"ne", "!="},
      {"!=", "!="}, {"lt", "<"},       {"lessthan", "<"}, {"<", "<"},
      {"le", "<="}, {"<=", "<="},      {"gt", ">"},       {"greaterthan", ">"},
      {">", ">"},   {"ge", ">="},      {">=", ">="},      {"in", "in"}};
  for (const auto& [test, op] : kComparisons) {
    if (name == test) {
      RETURN_IF_ERROR(need_arg());
      return Compare(op, value, *arg);
    }
  }
  return Error(absl::StrCat("unknown test '", name, "'"));
}

std::vector<std::pair<std::string, Value>> DefaultGlobals() {
  std::vector<std::pair<std::string, Value>> globals;
  globals.emplace_back("range", Value::Callable([](const CallArgs& args) -> absl::StatusOr<Value> {
                         int64_t start = 0, stop = 0, step = 1;
                         const auto& p = args.positional;
                         for (const Value& v : p) {
                           if (!v.is_int()) return Error("range: arguments must be integers");
                         }
                         if (p.size() == 1) {
                           stop = p[0].as_int();
                         } else if (p.size() == 2 || p.size() == 3) {
                           start = p[0].as_int();
                           stop = p[1].as_int();
                           if (p.size() == 3) step = p[2].as_int();
                         } else {
                           return Error("range: expects 1 to 3 arguments");
                         }
                         if (step == 0) return Error("range: step must not be zero");
                         std::vector<Value> out;
                         for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
                           if (static_cast<int64_t>(out.size()) >= kMaxSequence)
                             return Error("range: too many items");
                           out.emplace_back(i);
                           if (__builtin_add_overflow(i, step, &i)) break;  // Past stop too.
                         }
                         return Value(std::move(out));
                       }));
  auto make_dict = [](bool is_namespace) {
    return Value::Callable([is_namespace](const CallArgs& args) -> absl::StatusOr<Value> {
      auto dict = std::make_shared<Dict>();
      dict->is_namespace = is_namespace;
      for (const Value& v : args.positional) {
        if (!v.is_dict()) return Error("namespace/dict: positional arguments must be dicts");
        for (const auto& [key, value] : v.dict().entries) dict->Set(key, value);
      }
      for (const auto& [key, value] : args.keyword) dict->Set(key, value);
      return Value(std::move(dict));
    });
  };
  globals.emplace_back("namespace", make_dict(true));
  globals.emplace_back("dict", make_dict(false));
  globals.emplace_back(
      "raise_exception", Value::Callable([](const CallArgs& args) -> absl::StatusOr<Value> {
        const Value* message = args.Get(0, "message");
        absl::Status raised = Error(message != nullptr ? message->ToString() : "raise_exception()");
        raised.SetPayload(kRaisedPayload, absl::Cord("1"));
        return raised;
      }));
  globals.emplace_back(
      "strftime_now", Value::Callable([](const CallArgs& args) -> absl::StatusOr<Value> {
        const Value* format = args.Get(0, "format");
        if (format == nullptr || !format->is_string())
          return Error("strftime_now: the format must be a string");
        const std::time_t now = std::time(nullptr);
        std::tm local{};
        localtime_r(&now, &local);
        char buf[256];
        const size_t n = std::strftime(buf, sizeof(buf), format->as_string().c_str(), &local);
        return Value(std::string(buf, n));
      }));
  return globals;
}

}  // namespace pdserve::text::jinja
