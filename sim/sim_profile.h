// What the simulator models instead of running it: a worker's performance profile
// (common/perf_profile.h: how long its forward passes take, the shape of one worker, the KV
// link), the same definition the router's cost model starts from and the emulated backend
// waits out.
// Thread-safety: plain values.
#ifndef PDSERVE_SIM_SIM_PROFILE_H_
#define PDSERVE_SIM_SIM_PROFILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/perf_profile.h"

namespace pdserve::sim {

using ::pdserve::WorkerShape;
using SimProfile = ::pdserve::PerfProfile;

inline absl::StatusOr<SimProfile> ParseSimProfile(const std::string& json_text) {
  return ParsePerfProfile(json_text);
}
inline absl::StatusOr<SimProfile> LoadSimProfile(const std::string& path) {
  return LoadPerfProfile(path);
}

}  // namespace pdserve::sim

#endif  // PDSERVE_SIM_SIM_PROFILE_H_
