// pdserve-bench transfer-raw: KV-shaped transfers between two processes over UCX (shared
// memory and TCP), per layer and whole, for f32 and f16 caches, beside ucx_perftest (best of
// put/am/tag at the same message size and transport) and memcpy, measured in the same run.
// The receiver is this process; the sender is a child (`transfer-raw-sender`) driven over a
// pipe, one transfer per command.
#ifndef PDSERVE_BENCH_TRANSFER_TRANSFER_RAW_BENCH_H_
#define PDSERVE_BENCH_TRANSFER_TRANSFER_RAW_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/kv_layout.h"

namespace pdserve::bench {

struct TransferRawConfig {
  std::string out_dir;
  std::string self_path;  // This binary, to start the sender.
  // KV shape: tokens x layers x K|V x kv_heads x head_dim, in blocks of block_size tokens.
  int tokens = 2048;
  int layers = 24;
  int kv_heads = 2;
  int head_dim = 64;
  int block_size = 16;
  std::vector<std::string> transports = {"shm", "tcp"};
  std::vector<DType> dtypes = {DType::kF32, DType::kF16};
  int layer_repetitions = 40;
  int whole_repetitions = 8;
  int latency_repetitions = 200;
  bool run_perftest = true;
};

absl::Status RunTransferRawBench(const TransferRawConfig& config);

// The child: reads "xfer TOKEN LAYERS BLOCKS" lines, answers
// "done TOKEN START_UNIX_NS END_UNIX_NS PATH" (or "error MESSAGE"); "quit" ends it.
absl::Status RunTransferRawSender(const std::string& descriptor_hex, const std::string& transports,
                                  const std::string& net_devices);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_TRANSFER_TRANSFER_RAW_BENCH_H_
