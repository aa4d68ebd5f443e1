#include "router/router_metrics.h"

#include "server/metric_buckets.h"

namespace pdserve::router {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

prometheus::Histogram::BucketBoundaries RatioBuckets() {
  return {0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 4.0};
}

}  // namespace

RouterMetrics::RouterMetrics(prometheus::Registry& r)
    : requests_family(BuildCounter()
                          .Name("pdserve_router_requests_total")
                          .Help("Requests answered by the router, by gRPC status code.")
                          .Register(r)),
      request_errors_family(
          BuildCounter()
              .Name("pdserve_router_request_errors_total")
              .Help("Failed requests by error type (invalid_argument, not_found, overloaded, "
                    "unavailable, deadline_exceeded, cancelled, internal).")
              .Register(r)),
      requests_in_flight(BuildGauge()
                             .Name("pdserve_router_requests_in_flight")
                             .Help("Requests being relayed now.")
                             .Register(r)
                             .Add({})),
      client_share_refusals(
          BuildCounter()
              .Name("pdserve_router_client_share_refusals_total")
              .Help("Requests refused because their client held its share of the cluster's "
                    "request slots (--client_max_share).")
              .Register(r)
              .Add({})),
      clients_active(BuildGauge()
                         .Name("pdserve_router_clients")
                         .Help("Clients with requests in flight.")
                         .Register(r)
                         .Add({})),
      busiest_clients_family(
          BuildGauge()
              .Name("pdserve_router_client_requests_in_flight")
              .Help("Requests in flight of the clients holding the most (at most "
                    "--client_metrics_top of them), by client.")
              .Register(r)),
      ttft_family(
          BuildHistogram()
              .Name("pdserve_router_time_to_first_token_seconds")
              .Help("Arrival at the router until the first token left it, by placement mode.")
              .Register(r)),
      itl_family(BuildHistogram()
                     .Name("pdserve_router_inter_token_latency_seconds")
                     .Help("Time between consecutive token messages relayed to the client, by "
                           "placement mode.")
                     .Register(r)),
      e2e_family(BuildHistogram()
                     .Name("pdserve_router_e2e_request_latency_seconds")
                     .Help("Arrival at the router until the final message left it, by placement "
                           "mode (unplaced: ended before placement).")
                     .Register(r)),
      placements_family(
          BuildCounter()
              .Name("pdserve_router_placements_total")
              .Help("Placement decisions by mode (local, offload), reason and policy.")
              .Register(r)),
      decision_latency(
          BuildHistogram()
              .Name("pdserve_router_decision_latency_seconds")
              .Help("Validation-to-placement time of one request (tokenization excluded).")
              .Register(r)
              .Add({}, OverheadBuckets())),
      fallbacks_seen(BuildCounter()
                         .Name("pdserve_router_offload_fallbacks_total")
                         .Help("Offloaded requests the decode worker had to prefill locally.")
                         .Register(r)
                         .Add({})),
      interference_predicted_seconds(
          BuildCounter()
              .Name("pdserve_router_interference_predicted_seconds_total")
              .Help("Decode delay the cost model predicted for the mixed steps decode "
                    "workers reported (seconds summed over running streams).")
              .Register(r)
              .Add({})),
      interference_observed_seconds(
          BuildCounter()
              .Name("pdserve_router_interference_observed_seconds_total")
              .Help("Decode delay those mixed steps actually caused, over the "
                    "model's decode-only step time (seconds summed over running streams).")
              .Register(r)
              .Add({})),
      step_prediction_ratio(
          BuildHistogram()
              .Name("pdserve_router_step_prediction_ratio")
              .Help("Observed over predicted engine step time, per reported step.")
              .Register(r)
              .Add({}, RatioBuckets())),
      ttft_prediction_family(
          BuildHistogram()
              .Name("pdserve_router_ttft_prediction_ratio")
              .Help("Observed over predicted TTFT of finished requests, by placement mode.")
              .Register(r)),
      workers_family(BuildGauge()
                         .Name("pdserve_router_workers")
                         .Help("Registered workers by role and state.")
                         .Register(r)),
      worker_removals(BuildCounter()
                          .Name("pdserve_router_worker_removals_total")
                          .Help("Workers removed (stream closed, silent, replaced).")
                          .Register(r)
                          .Add({})),
      router_stalls(BuildCounter()
                        .Name("pdserve_router_stalls_total")
                        .Help("Times the router found it had not run for over twice its sweep "
                              "interval (SIGSTOP, a VM or swap stall); its workers' silence "
                              "during the stall was not held against them.")
                        .Register(r)
                        .Add({})),
      role_switches_family(BuildCounter()
                               .Name("pdserve_router_role_switches_total")
                               .Help("Worker role changes by target role and outcome: started, "
                                     "completed, aborted (the worker kept its role), refused.")
                               .Register(r)),
      role_switch_seconds(
          BuildHistogram()
              .Name("pdserve_router_role_switch_seconds")
              .Help("From the order to the worker's registration in its new role (its drain, "
                    "the longest running stream's remaining time included).")
              .Register(r)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60,
                                                               120, 300, 600})),
      requests_handed_back(BuildCounter()
                               .Name("pdserve_router_requests_handed_back_total")
                               .Help("Requests handed back before their first token by a decode "
                                     "worker leaving the decode role, and placed again.")
                               .Register(r)
                               .Add({})),
      http_requests_family(
          BuildCounter()
              .Name("pdserve_router_http_requests_total")
              .Help("Requests to the OpenAI-compatible HTTP front, by path and HTTP status (499: "
                    "the client went away).")
              .Register(r)),
      http_open_connections(BuildGauge()
                                .Name("pdserve_router_http_open_connections")
                                .Help("Open connections to the OpenAI-compatible HTTP front.")
                                .Register(r)
                                .Add({})),
      objectives_family(
          BuildCounter()
              .Name("pdserve_router_objectives_total")
              .Help("Finished requests by whether they met their own objectives (the request's, "
                    "its slo_class's, or the router's defaults; slo_class empty without one): "
                    "objective ttft or tpot, result met or missed.")
              .Register(r)) {}

prometheus::Counter& RouterMetrics::Requests(const std::string& model, const std::string& code) {
  return requests_family.Add({{"model_name", model}, {"code", code}});
}
prometheus::Counter& RouterMetrics::RequestError(const std::string& model,
                                                 const std::string& error_type) {
  return request_errors_family.Add({{"model_name", model}, {"error_type", error_type}});
}
prometheus::Histogram& RouterMetrics::Ttft(const std::string& model, const std::string& mode) {
  return ttft_family.Add({{"model_name", model}, {"mode", mode}}, LatencyBuckets());
}
prometheus::Histogram& RouterMetrics::Itl(const std::string& model, const std::string& mode) {
  return itl_family.Add({{"model_name", model}, {"mode", mode}}, InterTokenBuckets());
}
prometheus::Histogram& RouterMetrics::E2e(const std::string& model, const std::string& mode) {
  return e2e_family.Add({{"model_name", model}, {"mode", mode}}, LatencyBuckets());
}
prometheus::Counter& RouterMetrics::Placement(const std::string& mode, const std::string& reason,
                                              const std::string& policy) {
  return placements_family.Add({{"mode", mode}, {"reason", reason}, {"policy", policy}});
}
prometheus::Histogram& RouterMetrics::TtftPrediction(const std::string& mode) {
  return ttft_prediction_family.Add({{"mode", mode}}, RatioBuckets());
}
prometheus::Gauge& RouterMetrics::Workers(const std::string& role, const std::string& state) {
  return workers_family.Add({{"role", role}, {"state", state}});
}
prometheus::Counter& RouterMetrics::RoleSwitches(const std::string& to,
                                                 const std::string& outcome) {
  return role_switches_family.Add({{"to", to}, {"outcome", outcome}});
}
prometheus::Counter& RouterMetrics::HttpRequests(const std::string& path, const std::string& code) {
  return http_requests_family.Add({{"path", path}, {"code", code}});
}

prometheus::Counter& RouterMetrics::Objective(const std::string& slo_class,
                                              const std::string& objective, bool met) {
  return objectives_family.Add(
      {{"slo_class", slo_class}, {"objective", objective}, {"result", met ? "met" : "missed"}});
}

}  // namespace pdserve::router
