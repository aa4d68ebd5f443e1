// The model a benchmark runs on: the directory it was given, or a preset generated into
// models/<preset> on first use; with its config.json parsed.
// Thread-safety: stateless.
#ifndef PDSERVE_TOOLS_MEASURE_BENCH_MODEL_H_
#define PDSERVE_TOOLS_MEASURE_BENCH_MODEL_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/model_config.h"

namespace pdserve::measure {

struct BenchModel {
  std::string dir;
  ModelConfig config;
};

// `dir` empty: the `preset` in models/<preset> (made on first use; `bench` names the progress
// line that says so).
absl::StatusOr<BenchModel> LoadBenchModel(const std::string& dir, const std::string& preset,
                                          const std::string& bench);

}  // namespace pdserve::measure

#endif  // PDSERVE_TOOLS_MEASURE_BENCH_MODEL_H_
