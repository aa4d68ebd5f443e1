// The relay's overhead through real processes: the same concurrent streams sent through
// pdserve-router and straight to one of its decode workers, alternately (so drift hits both
// alike), comparing inter-token latency; then single requests one at a time each way,
// comparing TTFT (concurrent arrivals would measure which engine step a request joined).
// Used by `pdserve-bench router` (one CPU worker) and `fleet` (one of many emulated ones).
// Thread-safety: call from one thread; it starts and joins its own.
#ifndef PDSERVE_BENCH_ROUTER_RELAY_MEASURE_H_
#define PDSERVE_BENCH_ROUTER_RELAY_MEASURE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"

namespace pdserve::bench {

struct RelayConfig {
  int rounds = 4;
  int streams = 4;
  int tokens = 48;
  int ttft_requests = 10;
  int vocab = 4000;  // Prompt token ids are drawn below this.
  // The decode worker's id: requests through the router must land on it to be compared (the
  // router's status names where each went); empty: any.
  std::string decode_worker_id;
};

struct RelayResult {
  double itl_ms_router = 0;  // Mean per token.
  double itl_ms_direct = 0;
  double itl_p50_ms_router = 0;
  double itl_p50_ms_direct = 0;
  double ttft_ms_router = 0;  // Median, one at a time.
  double ttft_ms_direct = 0;
  double itl_overhead() const { return itl_ms_router / itl_ms_direct - 1.0; }
};

absl::StatusOr<RelayResult> MeasureRelay(const std::shared_ptr<grpc::Channel>& router,
                                         const std::shared_ptr<grpc::Channel>& decode,
                                         const RelayConfig& config);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_ROUTER_RELAY_MEASURE_H_
