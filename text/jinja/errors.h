// The errors the template builtins raise: a template's own mistakes are INVALID_ARGUMENT, with
// Python's wording where Jinja would raise a TypeError.
#ifndef PDSERVE_TEXT_JINJA_ERRORS_H_
#define PDSERVE_TEXT_JINJA_ERRORS_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "text/jinja/value.h"

namespace pdserve::text::jinja {

inline absl::Status Error(absl::string_view message) { return absl::InvalidArgumentError(message); }

// Items a list (from range(), repetition or concatenation) or an iterated string may hold;
// templates never need more.
inline constexpr int64_t kMaxSequence = int64_t{1} << 20;
// Bytes a string built by one builtin (join, replace, indent) may reach: each input may be
// within the render's limits and their product not (join's separator times its items).
inline constexpr size_t kMaxBuiltString = size_t{64} << 20;

inline absl::Status CheckBuiltString(const std::string& built, absl::string_view what) {
  if (built.size() <= kMaxBuiltString) return absl::OkStatus();
  return Error(absl::StrCat(what, ": result larger than ", kMaxBuiltString, " bytes"));
}

inline absl::Status TypeError(absl::string_view what, const Value& v) {
  return Error(absl::StrCat(what, ": not supported for type ", v.TypeName()));
}

}  // namespace pdserve::text::jinja

#endif  // PDSERVE_TEXT_JINJA_ERRORS_H_
