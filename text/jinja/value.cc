#include "text/jinja/value.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace pdserve::text::jinja {
namespace {

// Python's repr() of a float: the shortest digits that read back to the same double, in
// positional notation for exponents in [-4, 16), with ".0" on integral values.
std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  const int exponent = d == 0 ? 0 : static_cast<int>(std::floor(std::log10(std::fabs(d))));
  if (exponent < -4 || exponent >= 16) {
    // "1.5e+20" as Python writes it: mantissa without trailing zeros, two-digit exponent.
    std::string s = buf;
    const size_t e = s.find('e');
    std::string mantissa = s.substr(0, e);
    if (mantissa.find('.') != std::string::npos) {
      while (mantissa.back() == '0') mantissa.pop_back();
      if (mantissa.back() == '.') mantissa.pop_back();
    }
    int exp = std::atoi(s.c_str() + e + 1);
    std::snprintf(buf, sizeof(buf), "%se%c%02d", mantissa.c_str(), exp < 0 ? '-' : '+',
                  exp < 0 ? -exp : exp);
    return buf;
  }
  const int decimals = std::max(precision - 1 - exponent, 1);
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, d);
  std::string s = buf;
  while (s.size() > 2 && s.back() == '0' && s[s.size() - 2] != '.') s.pop_back();
  return s;
}

std::string QuoteRepr(const std::string& s) {
  // Python prefers single quotes, and double quotes when the text has a single quote only.
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c == quote) out += '\\';
        out += c;
    }
  }
  out += quote;
  return out;
}

}  // namespace

const Value* CallArgs::Get(size_t index, absl::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [key, value] : keyword) {
    if (key == name) return &value;
  }
  return nullptr;
}

const Value* Dict::Find(absl::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::Set(const std::string& key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(json.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> list;
      list.reserve(json.size());
      for (const auto& item : json) list.push_back(FromJson(item));
      return Value(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto dict = std::make_shared<Dict>();
      for (const auto& [key, item] : json.items()) dict->entries.emplace_back(key, FromJson(item));
      return Value(std::move(dict));
    }
    default:
      return Value();
  }
}

double Value::as_double() const {
  if (is_int()) return static_cast<double>(as_int());
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  return std::get<double>(data_);
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return std::get<double>(data_) != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !list().empty();
    case Kind::kDict:
      return !dict().entries.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return as_string();
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return as_bool() ? "True" : "False";
    case Kind::kInt:
      return absl::StrCat(as_int());
    case Kind::kFloat:
      return FloatRepr(std::get<double>(data_));
    case Kind::kString:
      return QuoteRepr(as_string());
    case Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < list().size(); ++i) {
        if (i > 0) out += ", ";
        out += list()[i].Repr();
      }
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, value] : dict().entries) {
        if (!first) out += ", ";
        first = false;
        absl::StrAppend(&out, QuoteRepr(key), ": ", value.Repr());
      }
      return out + "}";
    }
    case Kind::kCallable:
      return "<function>";
  }
  return "";
}

const char* Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "none";
    case Kind::kBool:
      return "boolean";
    case Kind::kInt:
      return "integer";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "string";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kCallable:
      return "function";
  }
  return "value";
}

bool operator==(const Value& a, const Value& b) {
  const bool a_num = a.is_number() || a.is_bool();
  const bool b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (a.list()[i] != b.list()[i]) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().entries.size() != b.dict().entries.size()) return false;
      for (const auto& [key, value] : a.dict().entries) {
        const Value* other = b.dict().Find(key);
        if (other == nullptr || *other != value) return false;
      }
      return true;
    }
    case Value::Kind::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

std::vector<std::string> CodePoints(absl::string_view s) {
  std::vector<std::string> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
    if (i + n > s.size()) n = 1;
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace pdserve::text::jinja
