#include "wire/report_bridge.h"

#include <algorithm>
#include <cstdint>

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
}

PrefillMeasurement MeasurementFromProto(const v1::PrefillResponse& p) {
  return PrefillMeasurement{
      .queue_ms = p.queue_ms(),
      .compute_ms = p.compute_ms(),
      .transfer_ms = p.transfer_ms(),
      .transfer_tail_ms = p.transfer_tail_ms(),
      .transfer_bytes = p.transfer_bytes(),
      .computed_tokens = static_cast<int>(std::min<uint32_t>(p.computed_tokens(), INT32_MAX))};
}

}  // namespace pdserve::wire
