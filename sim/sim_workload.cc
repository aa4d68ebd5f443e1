#include "sim/sim_workload.h"

#include <algorithm>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pdserve::sim {

std::vector<SimRequest> TraceRequests(const measure::Trace& trace, int vocab, uint64_t seed) {
  std::vector<SimRequest> out;
  out.reserve(trace.requests.size());
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const measure::TraceRequest& t = trace.requests[i];
    SimRequest r;
    r.arrival_s = t.arrival_s;
    r.prompt = measure::PromptTokens(trace, i, vocab, seed);
    r.max_tokens = std::max(1, t.output_tokens);
    r.kind = "trace";
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<SimRequest> WorkloadRequests(
    const std::vector<measure::WorkloadRequest>& workload,
    const std::map<std::string, router::SloConfig>& objectives) {
  std::vector<SimRequest> out;
  out.reserve(workload.size());
  for (const measure::WorkloadRequest& w : workload) {
    SimRequest r;
    r.arrival_s = w.arrival_s;
    r.prompt = w.prompt;
    r.max_tokens = w.max_tokens;
    r.follow_up_of = w.follow_up_of;
    r.kind = w.kind;
    if (auto it = objectives.find(w.kind); it != objectives.end()) r.slo = it->second;
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<std::vector<SloClass>> ParseSloClasses(const std::string& spec,
                                                      const std::string& flag) {
  std::vector<SloClass> out;
  for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    const std::vector<std::string> f = absl::StrSplit(part, ':');
    SloClass c;
    if (f.size() != 4 || f[0].empty() || !absl::SimpleAtod(f[1], &c.slo.ttft_ms) ||
        !absl::SimpleAtod(f[2], &c.slo.tpot_ms) || !absl::SimpleAtod(f[3], &c.share) ||
        !(c.slo.ttft_ms > 0) || !(c.slo.tpot_ms > 0) || !(c.share > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": '", part, "' is not NAME:TTFT_MS:TPOT_MS:SHARE with positive numbers"));
    }
    c.name = f[0];
    for (const SloClass& other : out) {
      if (other.name == c.name)
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag, ": class '", c.name, "' is named twice"));
    }
    out.push_back(std::move(c));
  }
  return out;
}

void AssignSloClasses(const std::vector<SloClass>& classes, uint64_t seed,
                      std::vector<SimRequest>* requests) {
  if (classes.empty()) return;
  double total = 0;
  for (const SloClass& c : classes) total += c.share;
  std::mt19937_64 rng(seed ^ 0x510c1a55ULL);
  std::uniform_real_distribution<double> unit(0, total);
  for (size_t i = 0; i < requests->size(); ++i) {
    SimRequest& r = (*requests)[i];
    const SloClass* chosen = &classes.back();
    if (r.follow_up_of >= 0 && r.follow_up_of < static_cast<int>(i)) {
      const std::string& name = (*requests)[r.follow_up_of].slo_class;
      for (const SloClass& c : classes) {
        if (c.name == name) chosen = &c;
      }
    } else {
      double u = unit(rng);
      for (const SloClass& c : classes) {
        if (u < c.share) {
          chosen = &c;
          break;
        }
        u -= c.share;
      }
    }
    r.slo_class = chosen->name;
    r.slo = chosen->slo;
  }
}

double OfferedRate(const std::vector<SimRequest>& requests) {
  if (requests.size() < 2) return 0;
  double first = requests.front().arrival_s, last = first;
  for (const SimRequest& r : requests) {
    first = std::min(first, r.arrival_s);
    last = std::max(last, r.arrival_s);
  }
  return last > first ? (requests.size() - 1) / (last - first) : 0;
}

}  // namespace pdserve::sim
