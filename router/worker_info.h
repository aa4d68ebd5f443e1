// The router's domain view of a worker, free of the wire: what it registered as (WorkerInfo),
// what it last reported (LoadSnapshot, with the engine steps since the previous report:
// common/worker_reports.h), and the changes of its prefix cache. router_wire.h and
// wire/report_bridge.h convert the Registry protos to these, once, at the edge; the
// registry, the placer, the cost model and the simulator see only these.
// Thread-safety: plain value types.
#ifndef PDSERVE_ROUTER_WORKER_INFO_H_
#define PDSERVE_ROUTER_WORKER_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/kv_layout.h"
#include "common/worker_reports.h"

namespace pdserve::router {

// A worker as it registered: the workers' own domain type (common/worker_reports.h).
using ::pdserve::kMaxWorkerIdBytes;
using ::pdserve::RoleName;
using ::pdserve::WorkerRole;
using WorkerInfo = ::pdserve::WorkerRegistration;

// StepObservation, LoadSnapshot and WorkerReport: common/worker_reports.h (the workers and
// the simulator build the same values).

// Changes of a decode worker's prefix cache (chained block hashes).
struct PrefixCacheUpdate {
  bool reset = false;  // Drop everything reported before; `stored` is the whole cache.
  std::vector<uint64_t> stored;
  std::vector<uint64_t> evicted;
};

// One registered worker as `pdctl status` shows it.
struct WorkerStatus {
  WorkerInfo info;
  LoadSnapshot load;
  absl::Duration since_report;
  absl::Duration registered_for;
  int router_in_flight = 0;
  int64_t indexed_blocks = 0;
  bool switching = false;  // Told to change role; not registered in the new one yet.
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_WORKER_INFO_H_
