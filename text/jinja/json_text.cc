// tojson: Python's json.dumps as Jinja's filter calls it (indent, sort_keys, ensure_ascii,
// separators), over template values.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "text/jinja/builtins.h"
#include "text/jinja/errors.h"

namespace pdserve::text::jinja {
namespace {

void AppendJsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  const std::vector<std::string> cps = CodePoints(s);
  for (const std::string& cp : cps) {
    const unsigned char c = static_cast<unsigned char>(cp[0]);
    if (cp.size() == 1) {
      switch (c) {
        case '"':
          *out += "\\\"";
          continue;
        case '\\':
          *out += "\\\\";
          continue;
        case '\n':
          *out += "\\n";
          continue;
        case '\r':
          *out += "\\r";
          continue;
        case '\t':
          *out += "\\t";
          continue;
        case '\b':
          *out += "\\b";
          continue;
        case '\f':
          *out += "\\f";
          continue;
        default:
          if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
            absl::StrAppend(out, "\\u", absl::Hex(c, absl::kZeroPad4));
            continue;
          }
          out->push_back(static_cast<char>(c));
          continue;
      }
    }
    if (!ensure_ascii) {
      *out += cp;
      continue;
    }
    // \uXXXX, with a surrogate pair above the BMP (as json.dumps writes).
    uint32_t v = cp.size() == 2 ? (c & 0x1f) : cp.size() == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k < cp.size(); ++k)
      v = (v << 6) | (static_cast<unsigned char>(cp[k]) & 0x3f);
    if (v >= 0x10000) {
      v -= 0x10000;
      absl::StrAppend(out, "\\u", absl::Hex(0xd800 + (v >> 10), absl::kZeroPad4), "\\u",
                      absl::Hex(0xdc00 + (v & 0x3ff), absl::kZeroPad4));
    } else {
      absl::StrAppend(out, "\\u", absl::Hex(v, absl::kZeroPad4));
    }
  }
  out->push_back('"');
}

absl::Status AppendJson(const Value& v, const JsonOptions& o, int depth, std::string* out) {
  if (depth > 100) return Error("tojson: nested too deeply");
  const std::string item_sep = o.separators ? o.separators->first : (o.indent ? "," : ", ");
  const std::string key_sep = o.separators ? o.separators->second : ": ";
  const std::string pad =
      o.indent ? "\n" + std::string(static_cast<size_t>(*o.indent) * (depth + 1), ' ') : "";
  const std::string end_pad =
      o.indent ? "\n" + std::string(static_cast<size_t>(*o.indent) * depth, ' ') : "";
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.as_bool() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
    case Value::Kind::kFloat: {
      if (v.is_float() && !std::isfinite(v.as_double())) {
        *out += std::isnan(v.as_double()) ? "NaN" : (v.as_double() < 0 ? "-Infinity" : "Infinity");
        return absl::OkStatus();
      }
      *out += v.Repr();
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      AppendJsonString(v.as_string(), o.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      *out += "[";
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += item_sep;
        *out += pad;
        RETURN_IF_ERROR(AppendJson(v.list()[i], o, depth + 1, out));
      }
      *out += end_pad + "]";
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (v.dict().entries.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.dict().entries) entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      *out += "{";
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) *out += item_sep;
        *out += pad;
        AppendJsonString(entries[i]->first, o.ensure_ascii, out);
        *out += key_sep;
        RETURN_IF_ERROR(AppendJson(entries[i]->second, o, depth + 1, out));
      }
      *out += end_pad + "}";
      return absl::OkStatus();
    }
    case Value::Kind::kCallable:
      return Error("tojson: a function is not JSON-serializable");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ToJsonText(const Value& v, const JsonOptions& options) {
  std::string out;
  RETURN_IF_ERROR(AppendJson(v, options, 0, &out));
  return out;
}

}  // namespace pdserve::text::jinja
