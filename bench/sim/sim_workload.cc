#include "bench/sim/sim_workload.h"

#include <algorithm>

namespace pdserve::sim {

std::vector<SimRequest> TraceRequests(const bench::Trace& trace, int vocab, uint64_t seed) {
  std::vector<SimRequest> out;
  out.reserve(trace.requests.size());
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const bench::TraceRequest& t = trace.requests[i];
    SimRequest r;
    r.arrival_s = t.arrival_s;
    r.prompt = bench::PromptTokens(trace, i, vocab, seed);
    r.max_tokens = std::max(1, t.output_tokens);
    r.kind = "trace";
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<SimRequest> WorkloadRequests(
    const std::vector<bench::WorkloadRequest>& workload,
    const std::map<std::string, router::SloConfig>& objectives) {
  std::vector<SimRequest> out;
  out.reserve(workload.size());
  for (const bench::WorkloadRequest& w : workload) {
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
