#include "router/router_wire.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "wire/report_bridge.h"
#include "wire/request_bridge.h"

namespace pdserve::router {

absl::StatusOr<WorkerRole> RoleFromProto(v1::WorkerRole role, absl::string_view field) {
  switch (role) {
    case v1::WORKER_ROLE_DECODE:
      return WorkerRole::kDecode;
    case v1::WORKER_ROLE_PREFILL:
      return WorkerRole::kPrefill;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be WORKER_ROLE_DECODE or WORKER_ROLE_PREFILL, got ",
                       v1::WorkerRole_Name(role)));
  }
}

v1::WorkerRole RoleToProto(WorkerRole role) {
  return role == WorkerRole::kDecode ? v1::WORKER_ROLE_DECODE : v1::WORKER_ROLE_PREFILL;
}

absl::StatusOr<WorkerInfo> WorkerInfoFromProto(const v1::WorkerRegistration& r) {
  WorkerInfo w;
  w.worker_id = r.worker_id();
  absl::StatusOr<WorkerRole> role = RoleFromProto(r.role(), "registration.role");
  if (!role.ok()) return role.status();
  w.role = *role;
  w.grpc_address = r.grpc_address();
  w.metrics_address = r.metrics_address();
  w.model = r.model();
  w.model_fingerprint = r.model_fingerprint();
  const v1::KvLayout& l = r.kv_layout();
  if (l.dtype() == v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError("registration.kv_layout.dtype: must be set");
  }
  if (l.dtype() < v1::DTYPE_F32 || l.dtype() > v1::DTYPE_BF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("registration.kv_layout.dtype: ", l.dtype(), " is unknown"));
  }
  // Each field saturates at INT32_MAX so that Validate() sees the absurd value, not a wrap.
  auto narrow = [](uint64_t v) { return static_cast<int>(std::min<uint64_t>(v, INT32_MAX)); };
  w.kv_layout.num_layers = narrow(l.num_layers());
  w.kv_layout.num_kv_heads = narrow(l.num_kv_heads());
  w.kv_layout.head_dim = narrow(l.head_dim());
  w.kv_layout.block_size = narrow(l.block_size());
  w.kv_layout.dtype = static_cast<DType>(static_cast<int>(l.dtype()));
  w.kv_layout.num_blocks = narrow(l.num_blocks());
  w.epoch = r.epoch();
  w.max_num_batched_tokens = narrow(r.max_num_batched_tokens());
  w.max_num_seqs = narrow(r.max_num_seqs());
  w.max_context_tokens = narrow(r.max_context_tokens());
  w.vocab_size = narrow(r.vocab_size());
  w.architecture = r.architecture();
  w.role_switching = r.role_switching();
  if (absl::Status s = w.Validate(); !s.ok()) return s;
  return w;
}

PrefixCacheUpdate PrefixUpdateFromProto(const v1::PrefixCacheEvents& e) {
  PrefixCacheUpdate u;
  u.reset = e.reset();
  u.stored.assign(e.stored().begin(), e.stored().end());
  u.evicted.assign(e.evicted().begin(), e.evicted().end());
  return u;
}

void WorkerInfoToProto(const WorkerInfo& w, v1::WorkerRegistration* out) {
  out->set_worker_id(w.worker_id);
  out->set_role(RoleToProto(w.role));
  out->set_grpc_address(w.grpc_address);
  out->set_metrics_address(w.metrics_address);
  out->set_model(w.model);
  out->set_model_fingerprint(w.model_fingerprint);
  wire::LayoutToProto(w.kv_layout, out->mutable_kv_layout());
  out->set_epoch(w.epoch);
  out->set_max_num_batched_tokens(static_cast<uint32_t>(w.max_num_batched_tokens));
  out->set_max_num_seqs(static_cast<uint32_t>(w.max_num_seqs));
  out->set_max_context_tokens(static_cast<uint32_t>(w.max_context_tokens));
  out->set_vocab_size(static_cast<uint32_t>(w.vocab_size));
  out->set_architecture(w.architecture);
  out->set_role_switching(w.role_switching);
}

void WorkerStatusToProto(const WorkerStatus& s, v1::WorkerStatus* out) {
  WorkerInfoToProto(s.info, out->mutable_registration());
  wire::LoadToProto(s.load, out->mutable_load());
  out->set_seconds_since_report(absl::ToDoubleSeconds(s.since_report));
  out->set_seconds_registered(absl::ToDoubleSeconds(s.registered_for));
  out->set_router_in_flight(static_cast<uint32_t>(s.router_in_flight));
  out->set_indexed_blocks(static_cast<uint64_t>(s.indexed_blocks));
  out->set_switching(s.switching);
}

void PlacementToProto(const Placement& p, v1::Placement* out) {
  out->set_decode_worker_id(p.decode.worker_id);
  out->set_mode(p.offload ? v1::PLACEMENT_MODE_OFFLOAD : v1::PLACEMENT_MODE_LOCAL);
  for (size_t i = 0; i < p.prefill.size(); ++i) {
    if (i == 0) {
      out->set_prefill_worker_id(p.prefill[i].worker_id);
    } else {
      out->add_alternate_prefill_worker_ids(p.prefill[i].worker_id);
    }
  }
  out->set_reason(p.reason);
  out->set_policy(p.policy);
  out->set_predicted_interference_ms(p.predicted_interference_ms);
  out->set_predicted_offload_cost_ms(p.predicted_offload_cost_ms);
  out->set_predicted_ttft_local_ms(p.predicted_ttft_local_ms);
  out->set_predicted_ttft_offload_ms(p.predicted_ttft_offload_ms);
  out->set_uncached_tokens(static_cast<uint32_t>(p.uncached_tokens));
  out->set_running_decodes(static_cast<uint32_t>(p.running_decodes));
}

void DecisionRecordToProto(const DecisionRecord& r, v1::DecisionRecord* out) {
  out->set_request_id(r.request_id);
  out->set_model(r.model);
  out->set_prompt_tokens(static_cast<uint32_t>(r.prompt_tokens));
  PlacementToProto(r.placement, out->mutable_placement());
  out->set_time_unix_nanos(absl::ToUnixNanos(r.time));
  out->set_decision_us(r.decision_us);
}

PrefillOutcome PrefillOutcomeOf(const v1::GenerateResult& result, uint64_t model_fingerprint) {
  const v1::Placement& p = result.placement();
  // A worker's counts are uint32 on the wire: clamped, a forged one cannot overflow an int.
  auto count = [](uint32_t n) { return static_cast<int>(std::min<uint32_t>(n, INT32_MAX)); };
  return PrefillOutcome{.model_fingerprint = model_fingerprint,
                        .computed_tokens = count(p.prefill_computed_tokens()),
                        .prompt_tokens = count(result.usage().prompt_tokens()),
                        .compute_ms = result.timings().prefill_ms(),
                        .transfer_tail_ms = result.timings().transfer_tail_ms(),
                        .transfer_bytes = p.transfer_bytes()};
}

}  // namespace pdserve::router
