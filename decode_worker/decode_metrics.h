// Every Prometheus metric of a decode worker, declared once (Envoy's ALL_*_STATS habit).
// Names follow vLLM's schema with the pdserve_ prefix and base units in the name; latency
// histograms use SLO-friendly bucket edges.
// Thread-safety: prometheus-cpp metrics are thread-safe.
#ifndef PDSERVE_DECODE_WORKER_DECODE_METRICS_H_
#define PDSERVE_DECODE_WORKER_DECODE_METRICS_H_

#include <memory>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace pdserve::decode {

// Why an offloaded prefill ran locally after all (the `cause` label of
// pdserve_offload_fallbacks_total, and GenerateResult's fallback_cause). Each starts at 0, so
// that rates and dashboards by cause have series before the first fallback.
inline constexpr const char* kOffloadFallbackCauses[] = {
    "no_transport",        "prefill_error",   "prefill_deadline", "prefill_unresponsive",
    "transfer_incomplete", "layout_mismatch", "ttft_budget",      "awaiting_kv_full"};

struct DecodeMetrics {
  explicit DecodeMetrics(prometheus::Registry& registry, const std::string& model_name);

  prometheus::Histogram& time_to_first_token;
  prometheus::Histogram& inter_token_latency;
  prometheus::Histogram& e2e_request_latency;
  prometheus::Histogram& request_queue_time;
  prometheus::Histogram& request_prefill_time;
  prometheus::Gauge& num_requests_running;
  prometheus::Gauge& num_requests_waiting;
  prometheus::Gauge& num_requests_awaiting_kv;
  prometheus::Gauge& kv_cache_usage;
  prometheus::Gauge& kv_blocks_free;
  prometheus::Gauge& kv_blocks_quarantined;
  prometheus::Counter& prefix_cache_queries;
  prometheus::Counter& prefix_cache_hits;
  prometheus::Counter& preemptions;
  prometheus::Counter& fairness_preemptions;
  prometheus::Counter& stalled_clients;
  prometheus::Histogram& step_duration_decode_only;
  prometheus::Histogram& step_duration_mixed;
  prometheus::Histogram& step_batch_sequences;
  prometheus::Histogram& step_batch_tokens;
  prometheus::Histogram& step_host_overhead;
  prometheus::Counter& generation_tokens;
  prometheus::Counter& prompt_tokens;
  prometheus::Family<prometheus::Counter>& request_success_family;
  prometheus::Counter& requests_rejected;
  prometheus::Counter& requests_handed_back;
  // Offload path (issue: prefill worker): set by the offload coordinator.
  prometheus::Family<prometheus::Counter>& offload_fallbacks_family;
  prometheus::Counter& offload_completions;
  prometheus::Histogram& kv_transfer_wait;

  prometheus::Counter& RequestSuccess(const std::string& finished_reason);
  // The counter of `cause`, one of kOffloadFallbackCauses.
  prometheus::Counter& OffloadFallback(const std::string& cause);

 private:
  std::string model_;
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_DECODE_METRICS_H_
