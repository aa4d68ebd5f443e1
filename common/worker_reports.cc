#include "common/worker_reports.h"

#include "absl/strings/str_cat.h"
#include "common/net_address.h"

namespace pdserve {
namespace {

absl::Status Invalid(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("registration.", field, ": ", problem));
}

}  // namespace

absl::string_view RoleName(WorkerRole role) {
  return role == WorkerRole::kDecode ? "decode" : "prefill";
}

absl::Status WorkerRegistration::Validate() const {
  if (worker_id.empty()) return Invalid("worker_id", "must not be empty");
  if (worker_id.size() > kMaxWorkerIdBytes) {
    return Invalid("worker_id", absl::StrCat(worker_id.size(), " bytes is over the limit of ",
                                             kMaxWorkerIdBytes));
  }
  if (auto hp = ParseHostPort(grpc_address, "registration.grpc_address"); !hp.ok())
    return hp.status();
  if (model.empty()) return Invalid("model", "must not be empty");
  const KvLayout& l = kv_layout;
  if (l.num_layers <= 0 || l.num_kv_heads <= 0 || l.head_dim <= 0) {
    return Invalid("kv_layout", "num_layers, num_kv_heads and head_dim must be > 0");
  }
  if (l.block_size <= 0 || (l.block_size & (l.block_size - 1)) != 0) {
    return Invalid("kv_layout.block_size", absl::StrCat(l.block_size, " is not a power of two"));
  }
  if (is_decode()) {
    if (l.num_blocks <= 0)
      return Invalid("kv_layout.num_blocks", "must be > 0 for a decode worker");
    if (max_num_batched_tokens <= 0) return Invalid("max_num_batched_tokens", "must be > 0");
    if (max_context_tokens <= 0) return Invalid("max_context_tokens", "must be > 0");
    if (vocab_size <= 0) return Invalid("vocab_size", "must be > 0");
  }
  return absl::OkStatus();
}

void StepHistory::Add(const StepObservation& step) {
  steps_.push_back(step);
  if (steps_.size() > kMaxReportedSteps) steps_.pop_front();
}

std::vector<StepObservation> StepHistory::Take() {
  std::vector<StepObservation> out(steps_.begin(), steps_.end());
  steps_.clear();
  return out;
}

}  // namespace pdserve
