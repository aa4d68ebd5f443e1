// pdserve-bench interference: the prefill/decode interference microbenchmark of seed 002,
// against a real pdserve-decode in local mode. For every chunk size (the worker's
// --max_num_batched_tokens, one worker process per chunk size), every D (background decode
// streams sharing a warm prefix) and every P (a cold prefill of unique tokens), repeated:
// wait for steady state, measure the decode-only TPOT, inject the prefill, measure TPOT while
// its chunks run and after, its duration, and its chunk count from the worker's step
// counters. Results go to a resumable directory (one JSON per run); then
// interference_table.csv, a fitted cost_model.json (R^2 on held-out configurations), a
// heatmap and a break-even plot, and summary.json.
#ifndef PDSERVE_BENCH_INTERFERENCE_INTERFERENCE_BENCH_H_
#define PDSERVE_BENCH_INTERFERENCE_INTERFERENCE_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pdserve::bench {

struct InterferenceBenchConfig {
  std::string out_dir;
  // Model directory; empty: the "small" preset in models/small (generated on first use).
  std::string model_dir;
  std::vector<int> decode_counts;   // D.
  std::vector<int> prefill_tokens;  // P.
  std::vector<int> chunk_sizes;
  int repetitions = 5;
  // A repetition whose decode-only baseline TPOT is off its configuration's median by more
  // than this (relative) ran on a disturbed machine and is measured again, at most
  // max_remeasured_per_config times per configuration (0 disables).
  double max_baseline_drift = 0.2;
  int max_remeasured_per_config = 2;
  // Background streams: shared prompt length (their warm context), tokens discarded before
  // steady state, and the decode-only window measured as the baseline.
  int context_tokens = 512;
  int warmup_tokens = 16;
  int baseline_tokens = 32;
  int after_tokens = 16;
  // Decode worker forward threads (0: all).
  int threads = 0;
  // The workers' engine backend (--backend): cpu, or cuda (GPU 0; offloads stage KV through
  // host memory).
  std::string backend = "cpu";
  // CPUs to pin the decode worker to (empty: none).
  std::vector<int> cpus;
  // The offload's cost on the break-even plot (ms); 0: the fitted cost model's transfer tail
  // plus its offload overhead for a 2048-token transfer.
  double transfer_cost_ms = 0;

  // The grids: --quick (the default) and --full.
  static InterferenceBenchConfig Quick();
  static InterferenceBenchConfig Full();
};

absl::Status RunInterferenceBench(const InterferenceBenchConfig& config);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_INTERFERENCE_INTERFERENCE_BENCH_H_
