#include "wire/report_bridge.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "wire/request_bridge.h"

namespace pdserve::wire {

WorkerReport ReportFromProto(const v1::LoadReport& r) {
  WorkerReport out;
  LoadSnapshot& l = out.load;
  l.running = static_cast<int>(r.running());
  l.waiting = static_cast<int>(r.waiting());
  l.awaiting_kv = static_cast<int>(r.awaiting_kv());
  l.free_blocks = r.free_blocks();
  l.total_blocks = r.total_blocks();
  l.pending_prefill_tokens =
      static_cast<int64_t>(std::min<uint64_t>(r.pending_prefill_tokens(), INT64_MAX));
  l.context_tokens = static_cast<int64_t>(std::min<uint64_t>(r.context_tokens(), INT64_MAX));
  // A figure that cannot be a sum of squares (negative, NaN, infinite) is taken as not reported.
  const double squares = r.pending_prefill_token_squares();
  l.pending_prefill_token_squares = std::isfinite(squares) && squares > 0 ? squares : 0;
  l.prefill_tokens_per_second = r.prefill_tokens_per_second();
  l.transfer_bytes_per_second = r.transfer_bytes_per_second();
  l.sequence = r.sequence();
  l.draining = r.draining();
  out.steps.reserve(r.recent_steps_size());
  for (const v1::StepSample& s : r.recent_steps()) {
    out.steps.push_back(StepObservation{
        .num_decode = static_cast<int>(s.num_decode()),
        .num_prefill_tokens = static_cast<int>(s.num_prefill_tokens()),
        .context_tokens = static_cast<int64_t>(s.context_tokens()),
        .prefill_context_tokens =
            static_cast<int64_t>(std::min(s.prefill_context_tokens(), s.context_tokens())),
        .duration_ms = s.duration_ms()});
  }
  return out;
}

void LoadToProto(const LoadSnapshot& l, v1::LoadReport* out) {
  out->set_running(static_cast<uint32_t>(l.running));
  out->set_waiting(static_cast<uint32_t>(l.waiting));
  out->set_awaiting_kv(static_cast<uint32_t>(l.awaiting_kv));
  out->set_free_blocks(static_cast<uint32_t>(l.free_blocks));
  out->set_total_blocks(static_cast<uint32_t>(l.total_blocks));
  out->set_pending_prefill_tokens(static_cast<uint64_t>(l.pending_prefill_tokens));
  out->set_pending_prefill_token_squares(l.pending_prefill_token_squares);
  out->set_context_tokens(static_cast<uint64_t>(std::max<int64_t>(0, l.context_tokens)));
  out->set_prefill_tokens_per_second(l.prefill_tokens_per_second);
  out->set_transfer_bytes_per_second(l.transfer_bytes_per_second);
  out->set_sequence(l.sequence);
  out->set_draining(l.draining);
}

void ReportToProto(const WorkerReport& report, v1::LoadReport* out) {
  LoadToProto(report.load, out);
  for (const StepObservation& step : report.steps) {
    v1::StepSample* s = out->add_recent_steps();
    s->set_num_decode(static_cast<uint32_t>(step.num_decode));
    s->set_num_prefill_tokens(static_cast<uint32_t>(step.num_prefill_tokens));
    s->set_context_tokens(static_cast<uint64_t>(step.context_tokens));
    s->set_prefill_context_tokens(static_cast<uint64_t>(step.prefill_context_tokens));
    s->set_duration_ms(step.duration_ms);
  }
}

void MeasurementToProto(const PrefillMeasurement& m, v1::PrefillResponse* out) {
  out->set_queue_ms(m.queue_ms);
  out->set_compute_ms(m.compute_ms);
  out->set_transfer_ms(m.transfer_ms);
  out->set_transfer_tail_ms(m.transfer_tail_ms);
  out->set_transfer_bytes(m.transfer_bytes);
  out->set_computed_tokens(static_cast<uint32_t>(std::max(0, m.computed_tokens)));
  out->set_batch_tokens(static_cast<uint64_t>(std::max<int64_t>(0, m.batch_tokens)));
  out->set_batch_token_squares(m.batch_token_squares);
}

PrefillMeasurement MeasurementFromProto(const v1::PrefillResponse& p) {
  return PrefillMeasurement{
      .queue_ms = p.queue_ms(),
      .compute_ms = p.compute_ms(),
      .transfer_ms = p.transfer_ms(),
      .transfer_tail_ms = p.transfer_tail_ms(),
      .transfer_bytes = p.transfer_bytes(),
      .computed_tokens = static_cast<int>(std::min<uint32_t>(p.computed_tokens(), INT32_MAX)),
      .batch_tokens = static_cast<int64_t>(std::min<uint64_t>(p.batch_tokens(), INT64_MAX)),
      .batch_token_squares = p.batch_token_squares()};
}

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

absl::StatusOr<WorkerRegistration> RegistrationFromProto(const v1::WorkerRegistration& r) {
  WorkerRegistration w;
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

void RegistrationToProto(const WorkerRegistration& w, v1::WorkerRegistration* out) {
  out->set_worker_id(w.worker_id);
  out->set_role(RoleToProto(w.role));
  out->set_grpc_address(w.grpc_address);
  out->set_metrics_address(w.metrics_address);
  out->set_model(w.model);
  out->set_model_fingerprint(w.model_fingerprint);
  LayoutToProto(w.kv_layout, out->mutable_kv_layout());
  out->set_epoch(w.epoch);
  out->set_max_num_batched_tokens(static_cast<uint32_t>(w.max_num_batched_tokens));
  out->set_max_num_seqs(static_cast<uint32_t>(w.max_num_seqs));
  out->set_max_context_tokens(static_cast<uint32_t>(w.max_context_tokens));
  out->set_vocab_size(static_cast<uint32_t>(w.vocab_size));
  out->set_architecture(w.architecture);
  out->set_role_switching(w.role_switching);
}

}  // namespace pdserve::wire
