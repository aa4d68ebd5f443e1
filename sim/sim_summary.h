// What a simulated run measured, as the serve bench reports a rate point: TTFT, TPOT and
// end-to-end percentiles over the requests that completed, and SLO attainment (the fraction of
// all requests that met both their TTFT and TPOT objectives: their own, else the default).
// Only measured requests count (the load around them at steady state does not).
// Thread-safety: pure functions.
#ifndef PDSERVE_SIM_SIM_SUMMARY_H_
#define PDSERVE_SIM_SIM_SUMMARY_H_

#include <map>
#include <string>

#include "nlohmann/json.hpp"
#include "sim/simulator.h"

namespace pdserve::sim {

struct Percentiles {
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
};

struct PointSummary {
  double rate = 0;   // Offered requests per second.
  int requests = 0;  // Measured.
  int errors = 0;
  int offloaded = 0;
  int fell_back = 0;
  double attainment = 0;
  // The lowest attainment among the prompt-length quartiles (requests ranked by prompt
  // length, ties by order, split in four equal groups): a configuration that meets the
  // objectives for 90 % of requests by giving up the longest prompts has a low one.
  double worst_quartile_attainment = 0;
  // Requests in SLO classes (SimRequest::slo_class): each class's attainment, and the lowest
  // (the overall attainment when no request has a class).
  std::map<std::string, double> class_attainment;
  double worst_class_attainment = 0;
  // Per schedule phase (SimRequest::phase; one entry without a schedule) and the lowest.
  std::map<int, double> phase_attainment;
  double worst_phase_attainment = 0;
  Percentiles ttft_ms;
  Percentiles tpot_ms;
  Percentiles e2e_ms;
};

bool MeetsObjectives(const SimRequestResult& r, const router::SloConfig& default_slo);
PointSummary Summarize(const SimResult& result, double rate, const router::SloConfig& default_slo);
nlohmann::json ToJson(const PointSummary& s);
nlohmann::json ToJson(const SimCounters& c);

}  // namespace pdserve::sim

#endif  // PDSERVE_SIM_SIM_SUMMARY_H_
