#include "decode_worker/decode_worker_config.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::decode {

absl::Status DecodeWorkerConfig::Validate() const {
  if (model_dir.empty()) return absl::InvalidArgumentError("--model: required");
  RETURN_IF_ERROR(server.Validate());
  RETURN_IF_ERROR(engine.Validate());
  RETURN_IF_ERROR(scheduler.Validate());
  if (num_blocks < 0) return absl::InvalidArgumentError(absl::StrCat("--num_blocks: ", num_blocks, " must be >= 0"));
  if (num_blocks == 0 && kv_cache_bytes < (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("--kv_cache_bytes: ", kv_cache_bytes, " is below 1 MiB"));
  }
  if (kv_transport != "ucx" && kv_transport != "none") {
    return absl::InvalidArgumentError(absl::StrCat("--kv_transport: '", kv_transport, "' is not one of ucx, none"));
  }
  if (kv_transport == "ucx") {
    RETURN_IF_ERROR(transport.Validate());
    RETURN_IF_ERROR(offload.Validate());
  }
  if (max_model_len < 0) return absl::InvalidArgumentError("--max_model_len: must be >= 0");
  return absl::OkStatus();
}

}  // namespace pdserve::decode
