// Everything a decode worker process is configured with, filled from flags in main.cc and
// checked by Validate() (errors name the flag and its limit).
// Thread-safety: a plain value type.
#ifndef PDSERVE_DECODE_WORKER_DECODE_WORKER_CONFIG_H_
#define PDSERVE_DECODE_WORKER_DECODE_WORKER_CONFIG_H_

#include <string>

#include "absl/status/status.h"
#include "common/kv_layout.h"
#include "common/registry_client.h"
#include "common/server_runner.h"
#include "decode_worker/offload_coordinator.h"
#include "decode_worker/scheduler.h"
#include "engine/model_loader.h"
#include "kvtransfer/factory.h"

namespace pdserve::decode {

struct DecodeWorkerConfig {
  // Model directory (config.json, safetensors, tokenizer.json). Required.
  std::string model_dir;
  // Stable id reported to the router. Default: "decode-" + the bound address.
  std::string worker_id;
  // Host that peers and the router use to reach this worker; empty: the listen host.
  std::string advertise_host;
  ServerRunnerConfig server;
  RegistryClientConfig registry;
  engine::EngineOptions engine;
  SchedulerConfig scheduler;
  // KV cache element type. Default f32 (the compute type of the CPU backend).
  DType kv_dtype = DType::kF32;
  // Pool size: num_blocks if > 0, else kv_cache_bytes. Default 512 MiB.
  int num_blocks = 0;
  int64_t kv_cache_bytes = int64_t{512} << 20;
  // "ucx" registers the pool for offloaded prefills; "none" runs local prefill only.
  std::string kv_transport = "ucx";
  kvtransfer::KvTransportConfig transport;
  // Offloaded prefills: timeouts and retries (with kv_transport "ucx").
  OffloadConfig offload;
  // Maximum prompt + generated tokens; 0: the model's max_position_embeddings.
  int max_model_len = 0;

  absl::Status Validate() const;
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_DECODE_WORKER_CONFIG_H_
