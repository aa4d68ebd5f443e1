#!/usr/bin/env python3
"""Writes pdserve's Grafana dashboards (deploy/grafana/*.json) from this description.

The JSON files are committed, so Grafana users import them as they are; this script is their
source: edit it, run it, commit both (the deploy tests fail when the JSON is stale).
Usage: dashboards.py [--check]   (--check: exit 1 if a committed file differs)
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Selectors: every pdserve series carries the namespace (added by the PodMonitor's target
# labels) and, where it is per model, model_name.
NS = 'namespace=~"$namespace"'
NS_MODEL = 'namespace=~"$namespace", model_name=~"$model"'
RATE = "$__rate_interval"


def quantiles(metric, selector, by="", qs=(0.5, 0.9, 0.99), legend=""):
    """histogram_quantile targets, one per quantile."""
    group = f"le{', ' + by if by else ''}"
    return [(f"histogram_quantile({q}, sum by ({group}) "
             f"(rate({metric}_bucket{{{selector}}}[{RATE}])))",
             f"p{int(q * 100)}{' ' + legend if legend else ''}")
            for q in qs]


def label_variable(name, label, metric, label_name):
    """A multi-value variable over the values of `metric`'s `label_name` ("All": every one)."""
    return {"type": "query", "name": name, "label": label, "datasource": DATASOURCE,
            "query": {"query": f"label_values({metric}, {label_name})", "refId": name},
            "includeAll": True, "multi": True, "allValue": ".*", "current": {}, "hide": 0,
            "refresh": 2, "options": [], "regex": "", "sort": 1, "skipUrlSync": False}


class Dashboard:
    def __init__(self, uid, title, description):
        self.uid, self.title, self.description = uid, title, description
        self.panels = []
        self.next_id = 1
        self.y = 0
        self.x = 0
        self.row_height = 0

    def row(self, title):
        if self.x:
            self.y += self.row_height
            self.x = 0
        self.panels.append({"type": "row", "title": title, "id": self._id(), "collapsed": False,
                            "panels": [], "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}})
        self.y += 1
        self.row_height = 0

    def _id(self):
        self.next_id += 1
        return self.next_id - 1

    def _place(self, w, h):
        if self.x + w > 24:
            self.y += self.row_height
            self.x, self.row_height = 0, 0
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_height = max(self.row_height, h)
        return pos

    def timeseries(self, title, description, targets, unit, w=8, h=8, stack=False):
        self.panels.append({
            "type": "timeseries", "title": title, "description": description,
            "id": self._id(), "datasource": DATASOURCE, "gridPos": self._place(w, h),
            "targets": self._targets(targets),
            "fieldConfig": {
                "defaults": {
                    "unit": unit,
                    "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                               "showPoints": "never",
                               "stacking": {"mode": "normal" if stack else "none",
                                            "group": "A"}}},
                "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom",
                                   "showLegend": True, "calcs": ["lastNotNull", "max"]},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
        })

    def stat(self, title, description, targets, unit, w=4, h=4, thresholds=None):
        steps = [{"color": "green", "value": None}]
        for value, color in thresholds or []:
            steps.append({"color": color, "value": value})
        self.panels.append({
            "type": "stat", "title": title, "description": description, "id": self._id(),
            "datasource": DATASOURCE, "gridPos": self._place(w, h),
            "targets": self._targets(targets),
            "fieldConfig": {"defaults": {"unit": unit, "thresholds": {"mode": "absolute",
                                                                        "steps": steps}},
                            "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                          "values": False},
                        "colorMode": "value", "graphMode": "area", "textMode": "auto"},
        })

    @staticmethod
    def _targets(targets):
        return [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr,
                 "legendFormat": legend, "range": True}
                for i, (expr, legend) in enumerate(targets)]

    def json(self):
        variables = [
            {"type": "datasource", "name": "datasource", "label": "Data source",
             "query": "prometheus", "current": {}, "hide": 0, "refresh": 1,
             "options": [], "regex": "", "skipUrlSync": False},
            label_variable("namespace", "Namespace", "pdserve_build_info", "namespace"),
            label_variable("model", "Model", "pdserve_router_requests_total", "model_name"),
        ]
        return {
            "uid": self.uid, "title": self.title, "description": self.description,
            "tags": ["pdserve", "llm-serving"], "timezone": "browser", "editable": True,
            "graphTooltip": 1, "refresh": "30s", "schemaVersion": 39, "version": 1,
            "time": {"from": "now-1h", "to": "now"},
            "templating": {"list": variables},
            "annotations": {"list": []},
            "links": [{"title": "Runbooks", "type": "link", "icon": "doc", "tooltip":
                       "What each pdserve alert means and what to do",
                       "url": "https://github.com/pdserve/pdserve/blob/main/docs/runbooks.md",
                       "targetBlank": True, "asDropdown": False, "includeVars": False,
                       "keepTime": False, "tags": []}],
            "panels": self.panels,
        }


def overview():
    d = Dashboard("pdserve-overview", "pdserve: SLOs, placement and workers",
                  "Disaggregated serving: what clients see (router), where prefills run and "
                  "why, decode and prefill workers, KV transfers. Objectives: router --slo_ttft "
                  "and --slo_tpot.")
    d.row("SLOs (as clients see them, at the router)")
    d.timeseries("Time to first token by placement",
                 "TTFT percentiles per placement mode (local: chunked on the decode worker; "
                 "offload: prefill worker + KV transfer).",
                 quantiles("pdserve_router_time_to_first_token_seconds", NS_MODEL, "mode",
                           legend="{{mode}}"), "s")
    d.timeseries("Time per output token by placement",
                 "Inter-token latency percentiles per placement mode of the stream.",
                 quantiles("pdserve_router_inter_token_latency_seconds", NS_MODEL, "mode",
                           legend="{{mode}}"), "s")
    d.timeseries("End-to-end latency by placement",
                 "Request latency percentiles, arrival to last message, per placement mode "
                 "(unplaced: ended before placement, e.g. refused).",
                 quantiles("pdserve_router_e2e_request_latency_seconds", NS_MODEL, "mode",
                           legend="{{mode}}"), "s")
    d.timeseries("SLO attainment",
                 "Share of first tokens within the TTFT objective and of tokens within the TPOT "
                 "objective (recording rules, 5 m).",
                 [(f"pdserve:ttft_slo_attainment:ratio_rate5m{{{NS_MODEL}}}",
                   "TTFT {{model_name}}"),
                  (f"pdserve:tpot_slo_attainment:ratio_rate5m{{{NS_MODEL}}}",
                   "TPOT {{model_name}}")], "percentunit")
    d.timeseries("Requests by status", "Requests finished per second by gRPC status code.",
                 [(f"sum by (code) (rate(pdserve_router_requests_total{{{NS_MODEL}}}[{RATE}]))",
                   "{{code}}")], "reqps", stack=True)
    d.timeseries("Errors by type",
                 "Failed requests per second by status (0 while none failed).",
                 [(f"sum by (code) (rate(pdserve_router_requests_total{{{NS_MODEL}, "
                   f'code!="OK"}}[{RATE}])) or on() vector(0)', "{{code}}")], "reqps")
    d.timeseries("HTTP API (OpenAI-compatible)",
                 "Requests to the routers' HTTP front per second by path and HTTP status (499: the "
                 "client went away), and its open connections (right axis scale: count).",
                 [(f"sum by (path, code) (rate(pdserve_router_http_requests_total{{{NS}}}[{RATE}]))",
                   "{{path}} {{code}}"),
                  (f"sum(pdserve_router_http_open_connections{{{NS}}})", "open connections")],
                 "short")
    d.timeseries("Clients",
                 "Requests in flight of each router's busiest clients (--client_metrics_top), "
                 "and requests refused because their client held its share of the cluster "
                 "(--client_max_share), per second.",
                 [(f"max by (client) (pdserve_router_client_requests_in_flight{{{NS}}}) "
                   "or on() vector(0)", "{{client}}"),
                  (f"sum(rate(pdserve_router_client_share_refusals_total{{{NS}}}[{RATE}]))",
                   "refused past share /s")], "short")
    d.stat("In flight", "Requests the routers relay now.",
           [(f"sum(pdserve_router_requests_in_flight{{{NS}}})", "in flight")], "short")
    d.stat("Error ratio (5 m)", "Failed / all requests of the model faring worst (recording rule).",
           [(f"max(pdserve:request_errors:ratio_rate5m{{{NS_MODEL}}})", "errors")],
           "percentunit", thresholds=[(0.01, "orange"), (0.05, "red")])

    d.row("Placement (router)")
    d.timeseries("Decisions by mode and reason",
                 "Placements per second: local or offload, and the reason the policy gave.",
                 [(f"sum by (mode, reason) (rate(pdserve_router_placements_total{{{NS}}}"
                   f"[{RATE}]))", "{{mode}} / {{reason}}")], "ops", stack=True)
    d.timeseries("Offload ratio", "Share of placements whose prefill ran on a prefill worker "
                 "(recording rule, 5 m, every model).",
                 [(f"pdserve:offload:ratio_rate5m{{{NS}}}", "offload ratio {{namespace}}")],
                 "percentunit")
    d.timeseries("Decision latency", "Time the router takes to place a request.",
                 quantiles("pdserve_router_decision_latency_seconds", NS, qs=(0.5, 0.99)), "s")
    d.timeseries("Predicted vs observed interference",
                 "Seconds of decode slowdown the cost model predicted for local prefills, and "
                 "what the decode workers then measured, per second of wall time.",
                 [(f"sum(rate(pdserve_router_interference_predicted_seconds_total{{{NS}}}"
                   f"[{RATE}]))", "predicted"),
                  (f"sum(rate(pdserve_router_interference_observed_seconds_total{{{NS}}}"
                   f"[{RATE}]))", "observed")], "s")
    d.timeseries("Prediction error",
                 "Observed / predicted, for TTFT (by mode) and decode step time: 1 is exact.",
                 quantiles("pdserve_router_ttft_prediction_ratio", NS, "mode", qs=(0.5, 0.9),
                           legend="TTFT {{mode}}")
                 + quantiles("pdserve_router_step_prediction_ratio", NS, qs=(0.5, 0.9),
                             legend="step"), "none")

    d.row("Decode workers")
    d.timeseries("Running, waiting, awaiting KV",
                 "Sequences decoding, queued, and waiting for an offloaded prefill's KV.",
                 [(f"sum(pdserve_num_requests_running{{{NS_MODEL}}})", "running"),
                  (f"sum(pdserve_num_requests_waiting{{{NS_MODEL}}})", "waiting"),
                  (f"sum(pdserve_num_requests_awaiting_kv{{{NS_MODEL}}})", "awaiting KV")],
                 "short")
    d.timeseries("KV cache usage", "Share of each decode worker's KV blocks in use.",
                 [(f"max by (pod, instance) (pdserve_kv_cache_usage_perc{{{NS_MODEL}}})",
                   "{{pod}}{{instance}}")], "percentunit")
    d.timeseries("Free and quarantined KV blocks",
                 "Quarantined: blocks an offloaded prefill may still write into.",
                 [(f"sum(pdserve_kv_blocks_free{{{NS_MODEL}}})", "free"),
                  (f"sum(pdserve_kv_blocks_quarantined{{{NS_MODEL}}})", "quarantined")],
                 "short")
    d.timeseries("Preemptions", "Sequences preempted per second (KV pressure).",
                 [(f"sum(rate(pdserve_num_preemptions_total{{{NS_MODEL}}}[{RATE}]))",
                   "preemptions")], "ops")
    d.timeseries("Prefix cache hit rate", "Prompt tokens served from cached KV / queried.",
                 [(f"sum(rate(pdserve_prefix_cache_hits_total{{{NS_MODEL}}}[{RATE}])) / "
                   f"sum(rate(pdserve_prefix_cache_queries_total{{{NS_MODEL}}}[{RATE}]))",
                   "hit rate")], "percentunit")
    d.timeseries("Step time", "Engine step duration by kind (decode only, or mixed with a "
                 "prefill chunk).",
                 quantiles("pdserve_step_duration_seconds", NS_MODEL, "kind", qs=(0.5, 0.99),
                           legend="{{kind}}"), "s")
    d.timeseries("Host overhead per step", "Scheduling and bookkeeping time outside the "
                 "forward pass.",
                 quantiles("pdserve_step_host_overhead_seconds", NS_MODEL, qs=(0.5, 0.99)), "s")
    d.timeseries("Queue time", "Time from arrival at a decode worker to its first step.",
                 quantiles("pdserve_request_queue_time_seconds", NS_MODEL, qs=(0.5, 0.99)), "s")

    d.row("Prefill workers and KV transfer")
    d.timeseries("Prefill queue", "Prompt tokens queued on prefill workers.",
                 [(f"sum by (pod, instance) (pdserve_prefill_queue_tokens{{{NS_MODEL}}})",
                   "{{pod}}{{instance}}")], "short")
    d.timeseries("Prefill time", "Forward pass over a prompt on a prefill worker, and its "
                 "queueing before it.",
                 quantiles("pdserve_prefill_time_seconds", NS_MODEL, qs=(0.5, 0.9),
                           legend="prefill")
                 + quantiles("pdserve_prefill_queue_time_seconds", NS_MODEL, qs=(0.5, 0.9),
                             legend="queue"), "s")
    d.timeseries("KV transfer time and tail",
                 "Whole transfer, and its tail after the last layer was computed (what "
                 "layer-wise streaming leaves on the TTFT).",
                 quantiles("pdserve_kv_transfer_seconds", NS_MODEL, qs=(0.5, 0.99),
                           legend="transfer")
                 + quantiles("pdserve_kv_transfer_tail_seconds", NS_MODEL, qs=(0.5, 0.99),
                             legend="tail"), "s")
    d.timeseries("KV bytes/s", "KV cache bytes written into decode workers' pools.",
                 [(f"sum(rate(pdserve_kv_transfer_bytes_total{{{NS_MODEL}}}[{RATE}]))",
                   "bytes/s")], "Bps")
    d.timeseries("Fallbacks by cause and prefill failures",
                 "Offloaded prefills the decode workers ran locally after all, by cause, and "
                 "prefill failures by reason (prefill workers).",
                 [(f"sum by (cause) (rate(pdserve_offload_fallbacks_total{{{NS_MODEL}}}"
                   f"[{RATE}]))", "fallback: {{cause}}"),
                  (f"sum by (reason) (rate(pdserve_prefill_failures_total{{{NS_MODEL}}}"
                   f"[{RATE}]))", "failed: {{reason}}")], "ops")
    d.timeseries("Prefill throughput", "Prompt tokens per second through prefill workers.",
                 [(f"sum(rate(pdserve_prefill_tokens_total{{{NS_MODEL}}}[{RATE}]))",
                   "tokens/s")], "short")

    d.row("Workers")
    d.timeseries("Registered workers", "Workers each router knows, by role and state.",
                 [(f"sum by (role, state) (pdserve_router_workers{{{NS}}})",
                   "{{role}} {{state}}")], "short")
    d.timeseries("Routers each worker is registered with",
                 "0: no router can place requests on that worker (it is alive but not ready).",
                 [(f"min by (pod, instance) (pdserve_registered_routers{{{NS}}})",
                   "{{pod}}{{instance}}")], "short")
    d.timeseries("Scrape targets up", "Processes Prometheus reaches, by job.",
                 [(f"sum by (job) (up{{{NS}}})", "{{job}}")], "short")
    d.timeseries("Worker removals", "Workers removed by a router (no load report in time).",
                 [(f"sum(rate(pdserve_router_worker_removals_total{{{NS}}}[{RATE}]))",
                   "removals")], "ops")
    d.stat("Processes by version", "pdserve processes running, by component and version.",
           [(f"count by (component, version) (pdserve_build_info{{{NS}}})",
             "{{component}} {{version}}")], "short", w=8)
    return d


DASHBOARDS = {"pdserve-overview.json": overview}


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for name, make in DASHBOARDS.items():
        text = json.dumps(make().json(), indent=2) + "\n"
        path = os.path.join(HERE, name)
        if check:
            if not os.path.exists(path) or open(path).read() != text:
                stale.append(name)
        else:
            with open(path, "w") as f:
                f.write(text)
    if stale:
        print("stale (run deploy/grafana/dashboards.py and commit): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
