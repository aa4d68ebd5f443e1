// pdserve-bench transfer: time to first token of offloaded requests, end to end through real
// processes (a decode worker and two prefill workers, KV over UCX), broken down into prefill
// queue, prefill compute, transfer tail after the last layer, and decode start, at several
// prompt lengths. Layer-wise streaming and a bulk variant (every layer sent after the whole
// forward) run side by side in the same run, request after request, so that their ratios
// are not at the mercy of a noisy machine.
#ifndef PDSERVE_BENCH_TRANSFER_TRANSFER_BENCH_H_
#define PDSERVE_BENCH_TRANSFER_TRANSFER_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pdserve::bench {

struct TransferBenchConfig {
  std::string out_dir;
  // Model directory; empty: the "small" preset under models/small (generated on first use).
  std::string model_dir;
  std::vector<int> prompt_lengths = {512, 2048, 8192};
  // Requests per prompt length and mode: three times as many for P <= 1024, a third (at
  // least 1) for P >= 8192.
  int repetitions = 3;
  // UCX transport between the workers (UCX_TLS), e.g. shm or tcp.
  std::string transport = "shm";
  // Forward threads of the prefill workers; 0: all hardware threads.
  int prefill_threads = 0;
  // The workers' engine backend (--backend): cpu, or cuda (GPU 0; offloads stage KV through
  // host memory).
  std::string backend = "cpu";
};

absl::Status RunTransferBench(const TransferBenchConfig& config);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_TRANSFER_TRANSFER_BENCH_H_
