// Every Prometheus metric of the router, declared once. Request-level latencies as the
// client sees them through the router (TTFT, inter-token, end-to-end), requests by gRPC code
// and error type, placement decisions by mode, reason and policy, decision latency, the cost
// model's prediction quality (predicted vs observed interference, step and TTFT prediction
// ratios), workers by role and state, and the HTTP front's requests and connections.
// Thread-safety: prometheus-cpp metrics are thread-safe.
#ifndef PDSERVE_ROUTER_ROUTER_METRICS_H_
#define PDSERVE_ROUTER_ROUTER_METRICS_H_

#include <string>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace pdserve::router {

struct RouterMetrics {
  explicit RouterMetrics(prometheus::Registry& registry);

  prometheus::Family<prometheus::Counter>& requests_family;        // {model_name, code}
  prometheus::Family<prometheus::Counter>& request_errors_family;  // {model_name, error_type}
  prometheus::Gauge& requests_in_flight;
  // Per-client admission (client_admission.h): refusals of a client past its share, clients
  // with requests in flight, and the requests of the busiest few ({client}; a bounded set,
  // refreshed by the router's sweeper, so client names cannot grow the series without end).
  prometheus::Counter& client_share_refusals;
  prometheus::Gauge& clients_active;
  prometheus::Family<prometheus::Gauge>& busiest_clients_family;
  prometheus::Family<prometheus::Histogram>& ttft_family;      // {model_name, mode}
  prometheus::Family<prometheus::Histogram>& itl_family;       // {model_name}
  prometheus::Family<prometheus::Histogram>& e2e_family;       // {model_name}
  prometheus::Family<prometheus::Counter>& placements_family;  // {mode, reason, policy}
  prometheus::Histogram& decision_latency;
  prometheus::Counter& fallbacks_seen;
  // Base units (seconds), as Prometheus asks; the cost model itself works in ms.
  prometheus::Counter& interference_predicted_seconds;
  prometheus::Counter& interference_observed_seconds;
  prometheus::Histogram& step_prediction_ratio;  // observed / predicted
  prometheus::Family<prometheus::Histogram>&
      ttft_prediction_family;                             // {mode}: observed / predicted
  prometheus::Family<prometheus::Gauge>& workers_family;  // {role, state}
  prometheus::Counter& worker_removals;
  // Sweeps that found the router itself had not run (its workers' silence not counted).
  prometheus::Counter& router_stalls;
  // Role changes: {to, outcome}: started, completed, aborted (the worker kept its role),
  // refused (the request's checks failed).
  prometheus::Family<prometheus::Counter>& role_switches_family;
  prometheus::Histogram& role_switch_seconds;  // Ordered to registered in the new role.
  // Requests a decode worker leaving the decode role handed back, placed again.
  prometheus::Counter& requests_handed_back;
  // The OpenAI-compatible HTTP front (router/openai/).
  prometheus::Family<prometheus::Counter>& http_requests_family;  // {path, code}
  prometheus::Gauge& http_open_connections;
  // Finished requests against their own objectives (GenerateRequest.objectives, resolved).
  prometheus::Family<prometheus::Counter>& objectives_family;  // {slo_class, objective, result}

  prometheus::Counter& Requests(const std::string& model, const std::string& code);
  prometheus::Counter& RequestError(const std::string& model, const std::string& error_type);
  prometheus::Histogram& Ttft(const std::string& model, const std::string& mode);
  // `mode`: the placement ("local", "offload"), or "unplaced" for a request that ended
  // before one (E2e only).
  prometheus::Histogram& Itl(const std::string& model, const std::string& mode);
  prometheus::Histogram& E2e(const std::string& model, const std::string& mode);
  prometheus::Counter& Placement(const std::string& mode, const std::string& reason,
                                 const std::string& policy);
  prometheus::Histogram& TtftPrediction(const std::string& mode);
  prometheus::Gauge& Workers(const std::string& role, const std::string& state);
  prometheus::Counter& RoleSwitches(const std::string& to, const std::string& outcome);
  prometheus::Counter& HttpRequests(const std::string& path, const std::string& code);
  // `objective`: "ttft" or "tpot"; `met`: whether the request met it.
  prometheus::Counter& Objective(const std::string& slo_class, const std::string& objective,
                                 bool met);
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_ROUTER_METRICS_H_
