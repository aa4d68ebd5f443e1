#include "sim/sim_summary.h"

#include <algorithm>
#include <vector>

#include "tools/measure/report.h"

namespace pdserve::sim {
namespace {

Percentiles Of(const std::vector<double>& v) {
  if (v.empty()) return {};
  return {measure::Percentile(v, 50), measure::Percentile(v, 90), measure::Percentile(v, 99)};
}

nlohmann::json ToJson(const Percentiles& p) {
  return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}};
}

}  // namespace

bool MeetsObjectives(const SimRequestResult& r, const router::SloConfig& default_slo) {
  if (!r.ok) return false;
  const router::SloConfig& slo = r.slo.value_or(default_slo);
  return r.ttft_ms <= slo.ttft_ms && r.tpot_ms <= slo.tpot_ms;
}

PointSummary Summarize(const SimResult& result, double rate, const router::SloConfig& default_slo) {
  PointSummary s;
  s.rate = rate;
  std::vector<double> ttft, tpot, e2e;
  int attained = 0;
  std::vector<size_t> by_length;                       // The measured requests.
  std::map<std::string, std::pair<int, int>> classes;  // Met, measured.
  std::map<int, std::pair<int, int>> phases;           // Met, measured.
  for (size_t i = 0; i < result.requests.size(); ++i) {
    const SimRequestResult& r = result.requests[i];
    if (!r.measured) continue;
    by_length.push_back(i);
    ++s.requests;
    if (!r.slo_class.empty()) {
      std::pair<int, int>& c = classes[r.slo_class];
      ++c.second;
      c.first += MeetsObjectives(r, default_slo) ? 1 : 0;
    }
    std::pair<int, int>& p = phases[r.phase];
    ++p.second;
    p.first += MeetsObjectives(r, default_slo) ? 1 : 0;
    if (!r.ok) {
      ++s.errors;
      continue;
    }
    ttft.push_back(r.ttft_ms);
    if (r.tpot_ms > 0) tpot.push_back(r.tpot_ms);
    e2e.push_back(r.e2e_ms);
    s.offloaded += r.offloaded ? 1 : 0;
    s.fell_back += r.fell_back ? 1 : 0;
    attained += MeetsObjectives(r, default_slo) ? 1 : 0;
  }
  s.attainment = s.requests == 0 ? 0 : static_cast<double>(attained) / s.requests;
  s.worst_class_attainment = s.attainment;
  for (const auto& [name, c] : classes) {
    const double a = static_cast<double>(c.first) / c.second;
    s.class_attainment[name] = a;
    s.worst_class_attainment = std::min(s.worst_class_attainment, a);
  }
  s.worst_phase_attainment = s.attainment;
  for (const auto& [phase, c] : phases) {
    const double a = static_cast<double>(c.first) / c.second;
    s.phase_attainment[phase] = a;
    s.worst_phase_attainment = std::min(s.worst_phase_attainment, a);
  }
  std::stable_sort(by_length.begin(), by_length.end(), [&](size_t a, size_t b) {
    return result.requests[a].prompt_tokens < result.requests[b].prompt_tokens;
  });
  s.worst_quartile_attainment = by_length.empty() ? 0 : 1;
  for (size_t q = 0; q < 4; ++q) {
    const size_t begin = by_length.size() * q / 4, end = by_length.size() * (q + 1) / 4;
    if (begin == end) continue;
    int met = 0;
    for (size_t i = begin; i < end; ++i)
      met += MeetsObjectives(result.requests[by_length[i]], default_slo) ? 1 : 0;
    s.worst_quartile_attainment =
        std::min(s.worst_quartile_attainment, static_cast<double>(met) / (end - begin));
  }
  s.ttft_ms = Of(ttft);
  s.tpot_ms = Of(tpot);
  s.e2e_ms = Of(e2e);
  return s;
}

nlohmann::json ToJson(const PointSummary& s) {
  return {{"rate", s.rate},
          {"requests", s.requests},
          {"errors", s.errors},
          {"offloaded", s.offloaded},
          {"fell_back", s.fell_back},
          {"attainment", s.attainment},
          {"worst_quartile_attainment", s.worst_quartile_attainment},
          {"class_attainment", s.class_attainment},
          {"worst_class_attainment", s.worst_class_attainment},
          {"worst_phase_attainment", s.worst_phase_attainment},
          {"ttft_ms", ToJson(s.ttft_ms)},
          {"tpot_ms", ToJson(s.tpot_ms)},
          {"e2e_ms", ToJson(s.e2e_ms)}};
}

nlohmann::json ToJson(const SimCounters& c) {
  return {{"events", c.events},
          {"steps", c.steps},
          {"mixed_steps", c.mixed_steps},
          {"preemptions", c.preemptions},
          {"prefill_batches", c.prefill_batches},
          {"offloaded", c.offloaded},
          {"fallbacks", c.fallbacks},
          {"handed_back", c.handed_back},
          {"rejected", c.rejected},
          {"prefix_hit_tokens", c.prefix_hit_tokens},
          {"prefix_queried_tokens", c.prefix_queried_tokens},
          {"sequences_left", c.sequences_left},
          {"blocks_held_at_end", c.blocks_held_at_end},
          {"virtual_s", c.virtual_s},
          {"role_switches", c.role_switches},
          {"role_switches_unfinished", c.role_switches_unfinished}};
}

}  // namespace pdserve::sim
