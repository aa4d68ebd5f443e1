#include "decode_worker/decode_worker_config.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::decode {

WorkerProcessConfig DecodeWorkerConfig::EffectiveProcess() const {
  WorkerProcessConfig p = process;
  p.role = "decode";
  p.kv_transport = kv_transport == "ucx";
  return p;
}

SchedulerConfig DecodeWorkerConfig::EffectiveScheduler() const {
  SchedulerConfig s = scheduler;
  // The pool's block size (DecodeWorker::Create takes it from the pool the worker built).
  s.block_size =
      process.block_size > 0 ? process.block_size : WorkerProcessConfig::kDefaultBlockSize;
  return s;
}

absl::Status DecodeWorkerConfig::Validate() const {
  if (kv_transport != "ucx" && kv_transport != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_transport: '", kv_transport, "' is not one of ucx, none"));
  }
  RETURN_IF_ERROR(EffectiveProcess().Validate());
  RETURN_IF_ERROR(EffectiveScheduler().Validate());
  if (kv_transport == "ucx") RETURN_IF_ERROR(offload.Validate());
  if (max_model_len < 0) return absl::InvalidArgumentError("--max_model_len: must be >= 0");
  return absl::OkStatus();
}

}  // namespace pdserve::decode
