// The errors the template builtins raise: a template's own mistakes are INVALID_ARGUMENT, with
// Python's wording where Jinja would raise a TypeError.
#ifndef PDSERVE_ENGINE_JINJA_ERRORS_H_
#define PDSERVE_ENGINE_JINJA_ERRORS_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/jinja/value.h"

namespace pdserve::engine::jinja {

inline absl::Status Error(absl::string_view message) { return absl::InvalidArgumentError(message); }

inline absl::Status TypeError(absl::string_view what, const Value& v) {
  return Error(absl::StrCat(what, ": not supported for type ", v.TypeName()));
}

}  // namespace pdserve::engine::jinja

#endif  // PDSERVE_ENGINE_JINJA_ERRORS_H_
