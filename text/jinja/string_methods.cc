#include "text/jinja/string_methods.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "text/jinja/builtins.h"
#include "text/jinja/errors.h"

namespace pdserve::text::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

absl::StatusOr<std::string> StringArg(const CallArgs& args, size_t index, absl::string_view name,
                                      absl::string_view fn) {
  const Value* v = args.Get(index, name);
  if (v == nullptr || !v->is_string())
    return Error(absl::StrCat(fn, ": argument '", name, "' must be a string"));
  return v->as_string();
}

// startswith/endswith take a string or a tuple (list) of them.
absl::StatusOr<bool> AffixTest(const std::string& s, const Value* arg, bool prefix,
                               absl::string_view fn) {
  std::vector<Value> candidates;
  if (arg != nullptr && arg->is_string()) {
    candidates.push_back(*arg);
  } else if (arg != nullptr && arg->is_list()) {
    candidates = arg->list();
  } else {
    return Error(absl::StrCat(fn, ": argument must be a string or a tuple of strings"));
  }
  for (const Value& c : candidates) {
    if (!c.is_string()) return Error(absl::StrCat(fn, ": argument must be a string"));
    if (prefix ? absl::StartsWith(s, c.as_string()) : absl::EndsWith(s, c.as_string())) return true;
  }
  return false;
}

}  // namespace

// Python's str.strip family; `chars` null strips whitespace.
std::string Strip(absl::string_view s, const Value* chars, bool left, bool right) {
  auto strip_char = [&](char c) {
    if (chars == nullptr || chars->is_none()) return IsSpace(c);
    return chars->as_string().find(c) != std::string::npos;
  };
  size_t begin = 0, end = s.size();
  if (left)
    while (begin < end && strip_char(s[begin])) ++begin;
  if (right)
    while (end > begin && strip_char(s[end - 1])) --end;
  return std::string(s.substr(begin, end - begin));
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Capitalize(std::string s) {
  s = Lower(std::move(s));
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return s;
}

std::string Title(std::string s) {
  bool word_start = true;
  for (char& c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(word_start ? std::toupper(u) : std::tolower(u));
      word_start = false;
    } else {
      word_start = u < 0x80;  // Bytes of a non-ASCII letter do not start a word.
    }
  }
  return s;
}

// Python's str.split(sep=None, maxsplit=-1).
Value Split(const std::string& s, const Value* sep, int64_t max_split) {
  std::vector<Value> parts;
  if (sep == nullptr || sep->is_none()) {
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && IsSpace(s[i])) ++i;
      if (i >= s.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
        std::string rest = s.substr(i);
        while (!rest.empty() && IsSpace(rest.back())) rest.pop_back();
        parts.emplace_back(std::move(rest));
        break;
      }
      size_t j = i;
      while (j < s.size() && !IsSpace(s[j])) ++j;
      parts.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return Value(std::move(parts));
  }
  const std::string& d = sep->as_string();
  size_t start = 0;
  while (true) {
    const size_t at = (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split)
                          ? std::string::npos
                          : s.find(d, start);
    if (at == std::string::npos) {
      parts.emplace_back(s.substr(start));
      break;
    }
    parts.emplace_back(s.substr(start, at - start));
    start = at + d.size();
  }
  return Value(std::move(parts));
}

// strip's `chars`: none (whitespace) or a string.
absl::StatusOr<const Value*> StripChars(const CallArgs& args, absl::string_view fn) {
  const Value* chars = args.Get(0, "chars");
  if (chars != nullptr && !chars->is_none() && !chars->is_string())
    return Error(
        absl::StrCat(fn, ": the characters to strip must be a string, not ", chars->TypeName()));
  return chars;
}

absl::StatusOr<Value> StringMethod(const std::string& s, const std::string& name,
                                   const CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ASSIGN_OR_RETURN(const Value* chars, StripChars(args, name));
    return Value(Strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "upper") return Value(Upper(s));
  if (name == "lower") return Value(Lower(s));
  if (name == "title") return Value(Title(s));
  if (name == "capitalize") return Value(Capitalize(s));
  if (name == "split") {
    const Value* sep = args.Get(0, "sep");
    if (sep != nullptr && !sep->is_none() && (!sep->is_string() || sep->as_string().empty()))
      return Error("split: separator must be a non-empty string");
    const Value* max = args.Get(1, "maxsplit");
    return Split(s, sep, max != nullptr && max->is_int() ? max->as_int() : -1);
  }
  if (name == "startswith" || name == "endswith") {
    ASSIGN_OR_RETURN(bool b, AffixTest(s, args.Get(0, "prefix"), name == "startswith", name));
    return Value(b);
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(std::string from, StringArg(args, 0, "old", name));
    ASSIGN_OR_RETURN(std::string to, StringArg(args, 1, "new", name));
    const Value* count = args.Get(2, "count");
    int64_t left = count != nullptr && count->is_int() ? count->as_int() : -1;
    std::string out;
    size_t start = 0;
    if (from.empty()) return Value(s);
    while (left != 0) {
      const size_t at = s.find(from, start);
      if (at == std::string::npos) break;
      out.append(s, start, at - start);
      out += to;
      RETURN_IF_ERROR(CheckBuiltString(out, "replace"));
      start = at + from.size();
      if (left > 0) --left;
    }
    out.append(s, start, std::string::npos);
    return Value(std::move(out));
  }
  if (name == "find" || name == "count") {
    ASSIGN_OR_RETURN(std::string sub, StringArg(args, 0, "sub", name));
    if (name == "find") {
      const size_t at = s.find(sub);
      return Value(
          at == std::string::npos
              ? int64_t{-1}
              : static_cast<int64_t>(CodePoints(absl::string_view(s).substr(0, at)).size()));
    }
    if (sub.empty()) return Value(static_cast<int64_t>(CodePoints(s).size() + 1));
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    const Value* items = args.Get(0, "iterable");
    if (items == nullptr) return Error("join: an iterable is required");
    ASSIGN_OR_RETURN(std::vector<Value> parts, Iterate(*items));
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i > 0) out += s;
      out += parts[i].ToString();
      RETURN_IF_ERROR(CheckBuiltString(out, "join"));
    }
    return Value(std::move(out));
  }
  if (name == "splitlines") {
    std::vector<Value> lines;
    for (absl::string_view line : absl::StrSplit(s, '\n')) lines.emplace_back(std::string(line));
    if (!s.empty() && s.back() == '\n') lines.pop_back();
    return Value(std::move(lines));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
    if (s.empty()) return Value(false);
    for (char c : s) {
      const unsigned char u = static_cast<unsigned char>(c);
      const bool ok = name == "isdigit"   ? std::isdigit(u)
                      : name == "isalpha" ? std::isalpha(u)
                      : name == "isspace" ? IsSpace(c)
                                          : std::isalnum(u);
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  if (name == "format") {
    // "{}" placeholders filled in order (what templates use of str.format).
    std::string out;
    size_t next = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '}') {
        if (next >= args.positional.size()) return Error("format: too few arguments");
        out += args.positional[next++].ToString();
        ++i;
      } else {
        out += s[i];
      }
    }
    return Value(std::move(out));
  }
  return Error(absl::StrCat("string has no method '", name, "'"));
}

bool IsStringMethod(const std::string& name) {
  static const char* const kNames[] = {
      "strip",      "lstrip",     "rstrip",   "upper",   "lower",   "title", "capitalize",
      "split",      "startswith", "endswith", "replace", "find",    "count", "join",
      "splitlines", "isdigit",    "isalpha",  "isspace", "isalnum", "format"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

}  // namespace pdserve::text::jinja
