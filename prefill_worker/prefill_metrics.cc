#include "prefill_worker/prefill_metrics.h"

#include "server/metric_buckets.h"

namespace pdserve::prefill {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

PrefillMetrics::PrefillMetrics(prometheus::Registry& r, const std::string& model)
    : queue_time(BuildHistogram()
                     .Name("pdserve_prefill_queue_time_seconds")
                     .Help("Time a prefill waited before its batch started.")
                     .Register(r)
                     .Add({{"model_name", model}}, LatencyBuckets())),
      prefill_time(BuildHistogram()
                       .Name("pdserve_prefill_time_seconds")
                       .Help("Engine compute time of a prefill batch.")
                       .Register(r)
                       .Add({{"model_name", model}}, LatencyBuckets())),
      transfer_time(BuildHistogram()
                        .Name("pdserve_kv_transfer_seconds")
                        .Help("First layer write until the transfer completed at the receiver.")
                        .Register(r)
                        .Add({{"model_name", model}}, LatencyBuckets())),
      transfer_tail(
          BuildHistogram()
              .Name("pdserve_kv_transfer_tail_seconds")
              .Help("Last layer computed until the transfer completed (not hidden by compute).")
              .Register(r)
              .Add({{"model_name", model}}, InterTokenBuckets())),
      prefill_tokens(BuildCounter()
                         .Name("pdserve_prefill_tokens_total")
                         .Help("Prompt tokens prefilled.")
                         .Register(r)
                         .Add({{"model_name", model}})),
      transfer_bytes(BuildCounter()
                         .Name("pdserve_kv_transfer_bytes_total")
                         .Help("KV bytes written into decode workers.")
                         .Register(r)
                         .Add({{"model_name", model}})),
      transfer_layers(
          BuildCounter()
              .Name("pdserve_kv_transfer_layers_total")
              .Help("Layer writes handed to the KV transport (one per request and layer).")
              .Register(r)
              .Add({{"model_name", model}})),
      transfer_bandwidth(BuildGauge()
                             .Name("pdserve_kv_transfer_bandwidth_bytes_per_second")
                             .Help("Bandwidth of the most recent transfers.")
                             .Register(r)
                             .Add({{"model_name", model}})),
      prefill_tokens_per_second(BuildGauge()
                                    .Name("pdserve_prefill_throughput_tokens_per_second")
                                    .Help("Prefill throughput of the most recent batches.")
                                    .Register(r)
                                    .Add({{"model_name", model}})),
      queue_tokens(BuildGauge()
                       .Name("pdserve_prefill_queue_tokens")
                       .Help("Prompt tokens queued or computing.")
                       .Register(r)
                       .Add({{"model_name", model}})),
      requests_completed(BuildCounter()
                             .Name("pdserve_prefill_requests_total")
                             .Help("Prefills completed (first token returned).")
                             .Register(r)
                             .Add({{"model_name", model}})),
      requests_cancelled(BuildCounter()
                             .Name("pdserve_prefill_cancelled_total")
                             .Help("Prefills cancelled by their caller.")
                             .Register(r)
                             .Add({{"model_name", model}})),
      failures_family(BuildCounter()
                          .Name("pdserve_prefill_failures_total")
                          .Help("Prefills that failed, by reason.")
                          .Register(r)),
      model_(model) {
  // Every reason starts at 0: a rate over "no series yet" is nothing, not 0, and alerts and
  // dashboards over failures would see no data until the first one.
  for (const char* reason : kPrefillFailureReasons) Failure(reason);
}

prometheus::Counter& PrefillMetrics::Failure(const std::string& reason) {
  return failures_family.Add({{"model_name", model_}, {"reason", reason}});
}

}  // namespace pdserve::prefill
