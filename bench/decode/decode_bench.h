// pdserve-bench decode: the decode worker's host-side cost and batching regime, in process
// (the real EngineLoop, scheduler and model; output to counting sinks):
//  - scheduling overhead per step (everything outside the engine forward: planning, batch
//    packing, sampling, detokenization, streaming) at 8, 64 and 256 running sequences, p50/p99
//    and its share of the step;
//  - continuous serving (closed-loop clients, staggered request lengths: arrivals and
//    completions every few steps) against a static batch of the same width decoding in
//    lockstep (the two regimes of seed 000): per-token throughput ratio.
#ifndef PDSERVE_BENCH_DECODE_DECODE_BENCH_H_
#define PDSERVE_BENCH_DECODE_DECODE_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pdserve::bench {

struct DecodeBenchConfig {
  std::string model_dir;  // Empty: the small preset under models/small.
  std::string out_dir;
  std::vector<int> widths = {8, 64, 256};
  int steps = 20;   // Measured steps per width.
  int threads = 0;  // Forward threads (0: all).
  int continuous_width = 8;
  absl::Duration continuous_duration = absl::Seconds(8);
};

absl::Status RunDecodeBench(const DecodeBenchConfig& config);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_DECODE_DECODE_BENCH_H_
