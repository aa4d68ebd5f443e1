// Everything a decode worker process is configured with, filled from flags in main.cc and
// checked by Validate() (errors name the flag and its limit).
// Thread-safety: a plain value type.
#ifndef PDSERVE_DECODE_WORKER_DECODE_WORKER_CONFIG_H_
#define PDSERVE_DECODE_WORKER_DECODE_WORKER_CONFIG_H_

#include <string>

#include "absl/status/status.h"
#include "decode_worker/offload_coordinator.h"
#include "decode_worker/scheduler.h"
#include "worker/worker_process.h"

namespace pdserve::decode {

struct DecodeWorkerConfig {
  // What every worker has: model, addresses, router, engine, KV pool, UCX.
  WorkerProcessConfig process;
  // The scheduler's limits; its block_size is the pool's (process.block_size).
  SchedulerConfig scheduler;
  // "ucx" registers the pool for offloaded prefills; "none" runs local prefill only.
  std::string kv_transport = "ucx";
  // Offloaded prefills: timeouts and retries (with kv_transport "ucx").
  OffloadConfig offload;
  // Maximum prompt + generated tokens; 0: the model's max_position_embeddings.
  int max_model_len = 0;

  // `process` and `scheduler` as the worker runs them (the transport switch and the block
  // size applied).
  WorkerProcessConfig EffectiveProcess() const;
  SchedulerConfig EffectiveScheduler() const;
  absl::Status Validate() const;
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_DECODE_WORKER_CONFIG_H_
