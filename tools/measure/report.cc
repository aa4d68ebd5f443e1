#include "tools/measure/report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace pdserve::measure {

double Median(std::vector<double> v) { return Percentile(std::move(v), 50); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - lo);
}

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

double CoefficientOfVariation(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = Mean(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return m == 0 ? 0 : std::sqrt(ss / (v.size() - 1)) / m;
}

double SweepGoodput(const std::vector<std::pair<double, double>>& points, double target) {
  double best = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    const auto [rate, a] = points[i];
    if (a < target) continue;
    double g = rate;
    if (i + 1 < points.size()) {
      const double b = points[i + 1].second;
      if (b < target) g += (a - target) / std::max(1e-9, a - b) * (points[i + 1].first - g);
    }
    best = std::max(best, g);
  }
  return best;
}

void Progress(const std::string& bench, const std::string& message) {
  std::fprintf(stderr, "[%s %s] %s\n", bench.c_str(),
               absl::FormatTime("%H:%M:%S", absl::Now(), absl::LocalTimeZone()).c_str(),
               message.c_str());
  std::fflush(stderr);
}

absl::Status WriteJson(const std::string& path, const nlohmann::json& value) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  out << value.dump(2) << "\n";
  out.flush();
  return out ? absl::OkStatus() : absl::InternalError(absl::StrCat("write failed: ", path));
}

absl::Status WriteSummary(const std::string& dir, const nlohmann::json& summary) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  return WriteJson(dir + "/summary.json", summary);
}

nlohmann::json MachineInfo() {
  std::string cpu = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      cpu = std::string(absl::StripAsciiWhitespace(line.substr(line.find(':') + 1)));
      break;
    }
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return {{"cpu", cpu},
          {"hardware_threads", std::thread::hardware_concurrency()},
          {"memory_gib", static_cast<double>(pages) * page / (1 << 30)},
          {"host", host},
          {"date", absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", absl::Now(), absl::LocalTimeZone())}};
}

absl::StatusOr<nlohmann::json> ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::DataLossError(absl::StrCat(path, ": not JSON"));
  return j;
}

}  // namespace pdserve::measure
