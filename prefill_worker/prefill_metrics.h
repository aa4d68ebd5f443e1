// Every Prometheus metric of a prefill worker, declared once.
// Thread-safety: prometheus-cpp metrics are thread-safe.
#ifndef PDSERVE_PREFILL_WORKER_PREFILL_METRICS_H_
#define PDSERVE_PREFILL_WORKER_PREFILL_METRICS_H_

#include <string>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace pdserve::prefill {

// Why a prefill fails (the `reason` label of pdserve_prefill_failures_total).
inline constexpr const char* kPrefillFailureReasons[] = {
    "bad_target", "layout_mismatch", "too_long", "deadline", "transfer", "open"};

struct PrefillMetrics {
  PrefillMetrics(prometheus::Registry& registry, const std::string& model_name);

  prometheus::Histogram& queue_time;
  prometheus::Histogram& prefill_time;
  prometheus::Histogram& transfer_time;
  prometheus::Histogram& transfer_tail;
  prometheus::Counter& prefill_tokens;
  prometheus::Counter& transfer_bytes;
  // Layer writes handed to the transport (one per request and layer): streaming progress.
  prometheus::Counter& transfer_layers;
  prometheus::Gauge& transfer_bandwidth;
  prometheus::Gauge& prefill_tokens_per_second;
  prometheus::Gauge& queue_tokens;
  prometheus::Counter& requests_completed;
  prometheus::Counter& requests_cancelled;
  prometheus::Family<prometheus::Counter>& failures_family;
  // The counter of `reason`, one of kPrefillFailureReasons.
  prometheus::Counter& Failure(const std::string& reason);

 private:
  std::string model_;
};

}  // namespace pdserve::prefill

#endif  // PDSERVE_PREFILL_WORKER_PREFILL_METRICS_H_
