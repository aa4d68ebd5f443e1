// Shared pieces of pdserve-bench: summary statistics, a text table on stdout, progress on
// stderr, and summary.json in the output directory.
// Thread-safety: single-threaded helpers.
#ifndef PDSERVE_TOOLS_MEASURE_REPORT_H_
#define PDSERVE_TOOLS_MEASURE_REPORT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/text_table.h"
#include "nlohmann/json.hpp"

namespace pdserve::measure {

double Median(std::vector<double> v);
// Nearest-rank percentile, p in [0, 100].
double Percentile(std::vector<double> v, double p);
double Mean(const std::vector<double>& v);
// Coefficient of variation: stddev / mean (0 for fewer than two values).
double CoefficientOfVariation(const std::vector<double>& v);

// Goodput of a rate sweep of (rate, attainment) points sorted by rate: the highest rate whose
// attainment meets `target`, interpolated towards the next rate when that one misses it
// (DistServe's definition; `pdserve-bench serve` and `pdserve-sim validate` both use it).
double SweepGoodput(const std::vector<std::pair<double, double>>& points, double target = 0.9);

// Progress line on stderr ("[engine] decode batch 8 ... 12.3 ms").
void Progress(const std::string& bench, const std::string& message);

// Creates `dir` and writes `summary` to dir/summary.json (pretty-printed).
absl::Status WriteSummary(const std::string& dir, const nlohmann::json& summary);
absl::Status WriteJson(const std::string& path, const nlohmann::json& value);
// Reads a JSON file: NOT_FOUND naming the path when it cannot be opened, DATA_LOSS when it
// is not JSON.
absl::StatusOr<nlohmann::json> ReadJson(const std::string& path);

// A description of the machine for reports: CPU model, cores, memory.
nlohmann::json MachineInfo();

}  // namespace pdserve::measure

#endif  // PDSERVE_TOOLS_MEASURE_REPORT_H_
