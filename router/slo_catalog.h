// Service-level objectives per request. A request may name a class configured on the router
// (--slo_classes, e.g. interactive:500ms:50ms,batch:30s:1s) and may set its own TTFT and TPOT;
// what it leaves unset comes from its class, then from the router's default (--slo_ttft,
// --slo_tpot). The placement policy decides with the request's own TTFT objective and with
// the tightest TPOT objective among the streams running where it would prefill.
// Thread-safety: immutable after Parse(); Resolve() is reentrant.
#ifndef PDSERVE_ROUTER_SLO_CATALOG_H_
#define PDSERVE_ROUTER_SLO_CATALOG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "router/placement/placement_policy.h"

namespace pdserve::router {

// The most an objective may be: one hour.
inline constexpr double kMaxObjectiveMs = 3600 * 1000.0;

struct SloClass {
  std::string name;
  SloConfig slo;
};

class SloCatalog {
 public:
  // Only the default.
  explicit SloCatalog(const SloConfig& default_slo = {}) : default_(default_slo) {}
  // `spec`: comma-separated NAME:TTFT:TPOT with durations (500ms, 2s); empty: no classes.
  // Names are [A-Za-z0-9_.-], at most 64 bytes, unique. Errors name --slo_classes.
  static absl::StatusOr<SloCatalog> Parse(absl::string_view spec, const SloConfig& default_slo);

  // A request's objectives: `ttft_ms` and `tpot_ms` if > 0, else its class's (an empty class
  // is the default), else the default. INVALID_ARGUMENT naming the field for an unknown class
  // or a value that is negative, not finite or above kMaxObjectiveMs.
  absl::StatusOr<SloConfig> Resolve(absl::string_view slo_class, double ttft_ms,
                                    double tpot_ms) const;

  const SloConfig& default_slo() const { return default_; }
  const std::vector<SloClass>& classes() const { return classes_; }

 private:
  SloConfig default_;
  std::vector<SloClass> classes_;
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_SLO_CATALOG_H_
