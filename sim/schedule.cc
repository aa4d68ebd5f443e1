#include "sim/schedule.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pdserve::sim {

absl::StatusOr<std::vector<SchedulePhase>> ParseSchedule(const std::string& text) {
  std::vector<SchedulePhase> phases;
  double requests = 0;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const std::string where =
        absl::StrCat("--schedule: phase ", phases.size() + 1, " ('", part, "')");
    const std::vector<absl::string_view> at = absl::StrSplit(part, '@');
    if (at.size() != 2) return absl::InvalidArgumentError(where + ": not CELL@RATE:SECONDS");
    const std::vector<absl::string_view> rs = absl::StrSplit(at[1], ':');
    SchedulePhase p;
    auto cell = ParseWorkloadCell(std::string(absl::StripAsciiWhitespace(at[0])));
    if (!cell.ok())
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", cell.status().message()));
    p.cell = *cell;
    if (rs.size() != 2 || !absl::SimpleAtod(rs[0], &p.rate) || !(p.rate > 0) ||
        !absl::SimpleAtod(rs[1], &p.duration_s) || !(p.duration_s > 0)) {
      return absl::InvalidArgumentError(
          where + ": RATE (requests per second) and SECONDS must be numbers > 0");
    }
    requests += p.rate * p.duration_s;
    phases.push_back(p);
  }
  if (phases.empty()) return absl::InvalidArgumentError("--schedule: no phase");
  if (requests > 1e6) {
    return absl::InvalidArgumentError(absl::StrCat("--schedule: ", static_cast<int64_t>(requests),
                                                   " requests in all, more than 1,000,000"));
  }
  return phases;
}

std::vector<SimRequest> ScheduleRequests(const std::vector<SchedulePhase>& phases, uint64_t seed,
                                         int vocab, int max_context) {
  std::vector<SimRequest> out;
  double start_s = 0;
  for (size_t i = 0; i < phases.size(); ++i) {
    const SchedulePhase& p = phases[i];
    const int count = std::max(2, static_cast<int>(std::lround(p.rate * p.duration_s)));
    // The cell's window is one request a second: at `rate`, its arrivals come that much closer.
    std::vector<SimRequest> window =
        FamilyRequests(p.cell, count, seed + 7919 * (i + 1), vocab, max_context);
    const int offset = static_cast<int>(out.size());
    for (SimRequest& r : window) {
      r.arrival_s = start_s + r.arrival_s / p.rate;
      r.phase = static_cast<int>(i);
      if (r.follow_up_of >= 0) r.follow_up_of += offset;
      r.kind = absl::StrCat("phase", i, ":", p.cell.Name());
      out.push_back(std::move(r));
    }
    start_s += p.duration_s;
  }
  return out;
}

}  // namespace pdserve::sim
