#include "router/slo_catalog.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"

namespace pdserve::router {
namespace {

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-')
      return false;
  }
  return true;
}

bool ValidObjective(double ms) { return std::isfinite(ms) && ms > 0 && ms <= kMaxObjectiveMs; }

}  // namespace

absl::StatusOr<SloCatalog> SloCatalog::Parse(absl::string_view spec, const SloConfig& default_slo) {
  SloCatalog catalog(default_slo);
  if (absl::StripAsciiWhitespace(spec).empty()) return catalog;
  for (absl::string_view entry : absl::StrSplit(spec, ',')) {
    const std::vector<absl::string_view> parts =
        absl::StrSplit(absl::StripAsciiWhitespace(entry), ':');
    if (parts.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--slo_classes: '", entry, "' is not NAME:TTFT:TPOT (e.g. interactive:500ms:50ms)"));
    }
    SloClass c;
    c.name = std::string(parts[0]);
    if (!ValidName(c.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--slo_classes: class name '", c.name, "' must be 1-64 of [A-Za-z0-9_.-]"));
    }
    for (const SloClass& other : catalog.classes_) {
      if (other.name == c.name) {
        return absl::InvalidArgumentError(
            absl::StrCat("--slo_classes: class '", c.name, "' is given twice"));
      }
    }
    absl::Duration ttft, tpot;
    if (!absl::ParseDuration(parts[1], &ttft) || !absl::ParseDuration(parts[2], &tpot) ||
        !ValidObjective(absl::ToDoubleMilliseconds(ttft)) ||
        !ValidObjective(absl::ToDoubleMilliseconds(tpot))) {
      return absl::InvalidArgumentError(
          absl::StrCat("--slo_classes: class '", c.name, "': '", parts[1], "' and '", parts[2],
                       "' must be durations above 0 and at most 1h (e.g. 500ms, 2s)"));
    }
    c.slo.ttft_ms = absl::ToDoubleMilliseconds(ttft);
    c.slo.tpot_ms = absl::ToDoubleMilliseconds(tpot);
    catalog.classes_.push_back(std::move(c));
  }
  return catalog;
}

absl::StatusOr<SloConfig> SloCatalog::Resolve(absl::string_view slo_class, double ttft_ms,
                                              double tpot_ms) const {
  SloConfig slo = default_;
  if (!slo_class.empty()) {
    const SloClass* found = nullptr;
    for (const SloClass& c : classes_) {
      if (c.name == slo_class) found = &c;
    }
    if (found == nullptr) {
      std::string known;
      for (const SloClass& c : classes_) absl::StrAppend(&known, known.empty() ? "" : ", ", c.name);
      return absl::InvalidArgumentError(absl::StrCat(
          "objectives.slo_class: '", slo_class.substr(0, 64), "' is not a class of this router (",
          known.empty() ? "it has none; see --slo_classes" : known, ")"));
    }
    slo = found->slo;
  }
  for (auto [field, value, target] : {std::tuple{"objectives.ttft_ms", ttft_ms, &slo.ttft_ms},
                                      std::tuple{"objectives.tpot_ms", tpot_ms, &slo.tpot_ms}}) {
    if (value == 0) continue;
    if (!ValidObjective(value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", value, " must be 0 (unset) or in (0, ", kMaxObjectiveMs, "] ms"));
    }
    *target = value;
  }
  return slo;
}

}  // namespace pdserve::router
