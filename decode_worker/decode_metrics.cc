#include "decode_worker/decode_metrics.h"

#include <algorithm>
#include <iterator>

#include "common/logging.h"
#include "server/metric_buckets.h"

namespace pdserve::decode {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

}  // namespace

DecodeMetrics::DecodeMetrics(prometheus::Registry& r, const std::string& model)
    : time_to_first_token(BuildHistogram()
                              .Name("pdserve_time_to_first_token_seconds")
                              .Help("Time from arrival to the first generated token.")
                              .Register(r)
                              .Add({{"model_name", model}}, LatencyBuckets())),
      inter_token_latency(BuildHistogram()
                              .Name("pdserve_inter_token_latency_seconds")
                              .Help("Time between consecutive generated tokens of a request.")
                              .Register(r)
                              .Add({{"model_name", model}}, InterTokenBuckets())),
      e2e_request_latency(BuildHistogram()
                              .Name("pdserve_e2e_request_latency_seconds")
                              .Help("Time from arrival to the last token.")
                              .Register(r)
                              .Add({{"model_name", model}}, LatencyBuckets())),
      request_queue_time(BuildHistogram()
                             .Name("pdserve_request_queue_time_seconds")
                             .Help("Time a request waited before the scheduler admitted it.")
                             .Register(r)
                             .Add({{"model_name", model}}, LatencyBuckets())),
      request_prefill_time(BuildHistogram()
                               .Name("pdserve_request_prefill_time_seconds")
                               .Help("Admission until the prompt's KV was complete.")
                               .Register(r)
                               .Add({{"model_name", model}}, LatencyBuckets())),
      num_requests_running(BuildGauge()
                               .Name("pdserve_num_requests_running")
                               .Help("Sequences in the running batch.")
                               .Register(r)
                               .Add({{"model_name", model}})),
      num_requests_waiting(BuildGauge()
                               .Name("pdserve_num_requests_waiting")
                               .Help("Sequences waiting for admission.")
                               .Register(r)
                               .Add({{"model_name", model}})),
      num_requests_awaiting_kv(BuildGauge()
                                   .Name("pdserve_num_requests_awaiting_kv")
                                   .Help("Sequences waiting for an offloaded prefill's KV.")
                                   .Register(r)
                                   .Add({{"model_name", model}})),
      kv_cache_usage(BuildGauge()
                         .Name("pdserve_kv_cache_usage_perc")
                         .Help("Fraction of KV blocks not free or evictable (0 to 1).")
                         .Register(r)
                         .Add({{"model_name", model}})),
      kv_blocks_free(BuildGauge()
                         .Name("pdserve_kv_blocks_free")
                         .Help("KV blocks free or evictable.")
                         .Register(r)
                         .Add({{"model_name", model}})),
      kv_blocks_quarantined(BuildGauge()
                                .Name("pdserve_kv_blocks_quarantined")
                                .Help("KV blocks a failed transfer may still write.")
                                .Register(r)
                                .Add({{"model_name", model}})),
      prefix_cache_queries(BuildCounter()
                               .Name("pdserve_prefix_cache_queries_total")
                               .Help("Prompt tokens looked up in the prefix cache.")
                               .Register(r)
                               .Add({{"model_name", model}})),
      prefix_cache_hits(BuildCounter()
                            .Name("pdserve_prefix_cache_hits_total")
                            .Help("Prompt tokens found in the prefix cache.")
                            .Register(r)
                            .Add({{"model_name", model}})),
      preemptions(BuildCounter()
                      .Name("pdserve_num_preemptions_total")
                      .Help("Sequences preempted (blocks freed, requeued for recompute).")
                      .Register(r)
                      .Add({{"model_name", model}})),
      fairness_preemptions(
          BuildCounter()
              .Name("pdserve_fairness_preemptions_total")
              .Help("Preemptions that let another client's waiting request in: the client "
                    "preempted ran at least two more sequences than the one waiting.")
              .Register(r)
              .Add({{"model_name", model}})),
      stalled_clients(
          BuildCounter()
              .Name("pdserve_stalled_clients_total")
              .Help("Requests ended because their client read nothing for --max_client_stall.")
              .Register(r)
              .Add({{"model_name", model}})),
      step_duration_decode_only(
          BuildHistogram()
              .Name("pdserve_step_duration_seconds")
              .Help("Engine step wall time by kind.")
              .Register(r)
              .Add({{"model_name", model}, {"kind", "decode_only"}}, InterTokenBuckets())),
      step_duration_mixed(
          prometheus::BuildHistogram()
              .Name("pdserve_step_duration_seconds")
              .Help("Engine step wall time by kind.")
              .Register(r)
              .Add({{"model_name", model}, {"kind", "mixed"}}, InterTokenBuckets())),
      step_batch_sequences(
          BuildHistogram()
              .Name("pdserve_step_batch_sequences")
              .Help("Sequences in an engine step.")
              .Register(r)
              .Add({{"model_name", model}},
                   prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256})),
      step_batch_tokens(BuildHistogram()
                            .Name("pdserve_step_batch_tokens")
                            .Help("Tokens in an engine step.")
                            .Register(r)
                            .Add({{"model_name", model}},
                                 prometheus::Histogram::BucketBoundaries{
                                     1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192})),
      step_host_overhead(BuildHistogram()
                             .Name("pdserve_step_host_overhead_seconds")
                             .Help("Time of a step spent outside the engine forward (scheduling, "
                                   "sampling, streaming).")
                             .Register(r)
                             .Add({{"model_name", model}},
                                  prometheus::Histogram::BucketBoundaries{
                                      5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 5e-3})),
      generation_tokens(BuildCounter()
                            .Name("pdserve_generation_tokens_total")
                            .Help("Tokens generated.")
                            .Register(r)
                            .Add({{"model_name", model}})),
      prompt_tokens(BuildCounter()
                        .Name("pdserve_prompt_tokens_total")
                        .Help("Prompt tokens of finished requests.")
                        .Register(r)
                        .Add({{"model_name", model}})),
      request_success_family(BuildCounter()
                                 .Name("pdserve_request_success_total")
                                 .Help("Finished requests by finish reason.")
                                 .Register(r)),
      requests_rejected(BuildCounter()
                            .Name("pdserve_requests_rejected_total")
                            .Help("Requests refused before admission (invalid or overloaded).")
                            .Register(r)
                            .Add({{"model_name", model}})),
      requests_handed_back(BuildCounter()
                               .Name("pdserve_requests_handed_back_total")
                               .Help("Requests that had produced nothing, handed back to the "
                                     "router to be placed elsewhere by a worker leaving the "
                                     "decode role.")
                               .Register(r)
                               .Add({{"model_name", model}})),
      offload_fallbacks_family(BuildCounter()
                                   .Name("pdserve_offload_fallbacks_total")
                                   .Help("Offloaded prefills that fell back, by cause.")
                                   .Register(r)),
      offload_completions(BuildCounter()
                              .Name("pdserve_offload_completions_total")
                              .Help("Offloaded prefills whose KV arrived.")
                              .Register(r)
                              .Add({{"model_name", model}})),
      kv_transfer_wait(BuildHistogram()
                           .Name("pdserve_kv_transfer_wait_seconds")
                           .Help("Time a sequence spent awaiting offloaded KV.")
                           .Register(r)
                           .Add({{"model_name", model}}, LatencyBuckets())),
      model_(model) {
  for (const char* cause : kOffloadFallbackCauses) OffloadFallback(cause);
}

prometheus::Counter& DecodeMetrics::RequestSuccess(const std::string& reason) {
  return request_success_family.Add({{"model_name", model_}, {"finished_reason", reason}});
}

prometheus::Counter& DecodeMetrics::OffloadFallback(const std::string& cause) {
  if (std::find(std::begin(kOffloadFallbackCauses), std::end(kOffloadFallbackCauses), cause) ==
      std::end(kOffloadFallbackCauses)) {
    // Still counted; the list (and the dashboards' view of it) is missing a cause.
    PDS_LOG_EVERY_N_SEC(ERROR, 60)
        << "offload fallback cause '" << cause << "' is not in kOffloadFallbackCauses";
  }
  return offload_fallbacks_family.Add({{"model_name", model_}, {"cause", cause}});
}

}  // namespace pdserve::decode
