#include "router/router_wire.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "wire/report_bridge.h"
#include "wire/request_bridge.h"

namespace pdserve::router {

PrefixCacheUpdate PrefixUpdateFromProto(const v1::PrefixCacheEvents& e) {
  PrefixCacheUpdate u;
  u.reset = e.reset();
  u.stored.assign(e.stored().begin(), e.stored().end());
  u.evicted.assign(e.evicted().begin(), e.evicted().end());
  return u;
}

void WorkerStatusToProto(const WorkerStatus& s, v1::WorkerStatus* out) {
  wire::RegistrationToProto(s.info, out->mutable_registration());
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
  return PrefillOutcome{
      .model_fingerprint = model_fingerprint,
      .computed_tokens = count(p.prefill_computed_tokens()),
      .prompt_tokens = count(result.usage().prompt_tokens()),
      .compute_ms = result.timings().prefill_ms(),
      .batch_tokens = static_cast<int64_t>(std::min<uint64_t>(p.prefill_batch_tokens(), INT64_MAX)),
      .batch_token_squares = p.prefill_batch_token_squares(),
      .transfer_tail_ms = result.timings().transfer_tail_ms(),
      .transfer_bytes = p.transfer_bytes()};
}

}  // namespace pdserve::router
