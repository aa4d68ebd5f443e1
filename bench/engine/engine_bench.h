// pdserve-bench engine: decode step time by batch size and prefill throughput on one model,
// measured beside the floors that bound them on this machine: weight bytes over measured
// memory-copy bandwidth (decode) and OpenBLAS sgemm GFLOP/s at the same GEMM shapes
// (prefill). Table on stdout, progress on stderr, summary.json in the output directory.
#ifndef PDSERVE_BENCH_ENGINE_ENGINE_BENCH_H_
#define PDSERVE_BENCH_ENGINE_ENGINE_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pdserve::bench {

struct EngineBenchConfig {
  // Model directory; empty: the "small" preset, generated on first use under models/small.
  std::string model_dir;
  std::string out_dir;
  // Thread counts to measure. Default {1, all hardware threads}.
  std::vector<int> thread_counts;
  std::vector<int> decode_batches = {1, 4, 8, 16, 32, 64};
  std::vector<int> prefill_lengths = {512, 2048};
  // Context each decoding sequence already has.
  int decode_context = 128;
  // Timed decode steps per batch size (the median is reported).
  int decode_steps = 16;
  int prefill_repetitions = 3;
  // How the model keeps its weights (auto: the checkpoint's dtype); the decode floors are for
  // the bytes actually stored.
  std::string weight_dtype = "auto";
  // The KV cache's element type (f32, f16, bf16), as the workers' --kv_dtype.
  std::string kv_dtype = "f32";
  // "cpu" or "cuda" (GPU 0: decode eager and with CUDA graphs per batch size, the HBM floor
  // from device copy bandwidth, prefill against cuBLAS on the same GEMMs).
  std::string backend = "cpu";
  // Backend cpu: the kernels' instruction set (auto, avx512, avx2, scalar: the workers'
  // --cpu_isa), so that one machine measures each path it has side by side.
  std::string cpu_isa = "auto";
};

absl::Status RunEngineBench(const EngineBenchConfig& config);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_ENGINE_ENGINE_BENCH_H_
