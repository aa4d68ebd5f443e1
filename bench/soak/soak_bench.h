// pdserve-bench soak: a real cluster (router, one prefill worker, two decode workers) under
// mixed traffic for --duration, with cancellations, short deadlines, malformed requests and
// injected faults (a prefill worker stopped then continued, a decode worker stopped briefly,
// a client that stops reading, a cancellation storm). Every process's resident memory is
// sampled throughout. It passes when, after the traffic stops, every decode worker is back at
// baseline (no sequence, no block in use, reserved or quarantined), the router relays
// nothing, every process is still up, no request ended with an unexpected status, and memory
// is flat: the last third of the run's RSS samples no more than 10 % (or 16 MiB) above the
// first third's, per process. Prints a table and writes summary.json; the exit status says
// whether it passed.
#ifndef PDSERVE_BENCH_SOAK_SOAK_BENCH_H_
#define PDSERVE_BENCH_SOAK_SOAK_BENCH_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pdserve::bench {

struct SoakBenchConfig {
  std::string out_dir;
  // Model directory; empty: the tiny preset in models/tiny.
  std::string model_dir;
  absl::Duration duration = absl::Seconds(60);
  // Client threads issuing requests back to back.
  int clients = 8;
  // Interval between injected faults.
  absl::Duration fault_interval = absl::Seconds(8);
  uint64_t seed = 7;
};

// FAILED_PRECONDITION (after writing summary.json) when a check failed.
absl::Status RunSoakBench(const SoakBenchConfig& config);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_SOAK_SOAK_BENCH_H_
