// pdserve-router: the cluster's front door. Serves the public Generation API and the internal
// Registry that workers join; validates and tokenizes requests, picks each one's decode
// worker (cached prefix, load, free KV) and decides with the interference-cost model whether
// its prefill runs there or on a prefill worker; relays the token stream back.
#include <algorithm>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/secret_file.h"
#include "router/placement/placement_policy.h"
#include "router/rebalance_flags.h"
#include "router/router.h"
#include "server/tls_flags.h"

ABSL_FLAG(std::vector<std::string>, model, {},
          "Model directories served (comma-separated); names are their base names.");
ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "gRPC listen address of the public Generation API (and of the Registry when "
          "--registry_listen is empty), host:port.");
ABSL_FLAG(std::string, registry_listen, "",
          "gRPC listen address of the internal Registry that workers join (and pdctl status "
          "reads); with TLS it demands client certificates. Empty: beside --listen.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:0", "/metrics listen address; empty disables.");
ABSL_FLAG(std::string, serving_info_path, "",
          "Write the bound addresses to this file once listening.");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "On SIGTERM, how long relayed requests may finish; those still running then end "
          "UNAVAILABLE saying so (clients retry elsewhere). Keep it below the orchestrator's "
          "grace period.");
ABSL_FLAG(
    absl::Duration, worker_timeout, absl::Seconds(2),
    "A worker without a load report for this long is removed (its requests end UNAVAILABLE).");
ABSL_FLAG(std::string, policy, "cost_model",
          "Placement policy: cost_model, always_local, always_offload, length_threshold.");
ABSL_FLAG(std::string, cost_model, "",
          "cost_model.json with the cost model's coefficients (default: built-in).");
ABSL_FLAG(int, min_offload_tokens, 256,
          "cost_model: prompts with fewer uncached tokens prefill locally unless their chunk would "
          "push running streams past --slo_tpot.");
ABSL_FLAG(int, min_tpot_offload_tokens, 32,
          "cost_model: prompts with fewer uncached tokens always prefill locally.");
ABSL_FLAG(double, tpot_headroom, pdserve::router::PolicyConfig{}.tpot_headroom,
          "cost_model: local prefills may stretch the running streams' predicted mean TPOT to "
          "this fraction of their objective; past it long prompts are offloaded.");
ABSL_FLAG(int, length_threshold, 1024, "length_threshold: offload when uncached tokens >= this.");
ABSL_FLAG(absl::Duration, max_prefill_queue, absl::Seconds(1),
          "cost_model: past this much prefill-worker queue, the delay an offload adds to the "
          "offloads behind it counts whole against it (below it, only what pushes them past "
          "their TTFT objective).");
ABSL_FLAG(int, alternates, 1, "Alternate prefill workers named with each offload.");
ABSL_FLAG(absl::Duration, slo_ttft, absl::Seconds(2), "TTFT objective the placement respects.");
ABSL_FLAG(absl::Duration, slo_tpot, absl::Milliseconds(200),
          "Time-per-output-token objective of running streams.");
ABSL_FLAG(std::string, slo_classes, "",
          "Named objectives requests may ask for (GenerateRequest.objectives.slo_class): "
          "NAME:TTFT:TPOT,... e.g. interactive:500ms:50ms,batch:30s:1s. A request's unset "
          "objectives come from its class, then from --slo_ttft/--slo_tpot.");
ABSL_FLAG(int, max_in_flight, 4096, "Requests relayed at once; more get RESOURCE_EXHAUSTED.");
ABSL_FLAG(double, client_max_share, 0.5,
          "The share of the cluster's request slots (running plus waiting, over the decode "
          "workers) one client may hold; beyond it RESOURCE_EXHAUSTED. 1: no per-client limit.");
ABSL_FLAG(int, client_min_requests, 4,
          "Requests any client may have in flight whatever its share.");
ABSL_FLAG(std::string, client_id_header, "",
          "A header naming the client (set by an authenticating gateway in front); empty: clients "
          "are told apart by TLS certificate or IP address.");
ABSL_FLAG(bool, verify_worker_addresses, true,
          "Accept a registration only once its address answers as the worker it claims; replace "
          "a holder of a worker id whose address does not.");
ABSL_FLAG(absl::Duration, worker_verify_timeout, absl::Seconds(1),
          "How long a worker's address may take to answer that check.");
ABSL_FLAG(int, max_workers_per_peer, 256,
          "Live worker registrations one peer address may hold; 0: no limit.");
ABSL_FLAG(std::string, worker_id_uri_prefix, "",
          "With TLS: a worker may register as id X only with a client certificate whose URI SAN "
          "is this prefix followed by X (e.g. spiffe://pdserve/worker/). Empty: any certificate "
          "from the CA may register under any id no live worker holds.");
ABSL_FLAG(int, client_metrics_top, 8, "Clients whose requests in flight /metrics shows.");
ABSL_FLAG(int, max_waiting_per_worker, 256,
          "Waiting requests per decode worker beyond which it takes no more.");
ABSL_FLAG(int, balance_abs, 8,
          "Prefix affinity yields to load when the busiest decode worker's load (as "
          "--decode_balance measures it) exceeds the idlest's by this many requests' worth...");
ABSL_FLAG(double, balance_rel, 1.5, "...and is this many times the idlest's.");
ABSL_FLAG(std::string, decode_balance, "streams",
          "A decode worker's load when placing: streams (the number of its requests) or work "
          "(the decode step time they predict: their count and the KV positions they attend "
          "to, at the cost model's prices; lower TPOT under the knee, earlier collapse past "
          "it: bench/README.md).");
ABSL_FLAG(int, decision_log_size, 1000, "Placement decisions kept for pdctl status.");
ABSL_FLAG(std::string, rebalance, "off",
          "on: the router moves role-switching workers (pdserve-decode --role_switching) between "
          "decode and prefill when one role is short and the other can spare a worker "
          "(docs/architecture.md); off: only `pdctl switch-role` does.");
ABSL_FLAG(int, tokenizer_threads, 2, "Threads that tokenize text prompts (never gRPC's own).");
ABSL_FLAG(int, max_tokenize_queue, 256,
          "Text prompts waiting to be tokenized; more get RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_prompt_bytes, 0,
          "Bytes of prompt text accepted; 0: 16 per token of the model's context.");
ABSL_FLAG(absl::Duration, testing_relay_read_delay, absl::ZeroDuration(),
          "Testing: pause before each downstream read (fault injection).");
ABSL_FLAG(absl::Duration, retry_after, absl::Milliseconds(200),
          "Retry-after hint given with RESOURCE_EXHAUSTED.");
ABSL_FLAG(std::string, http_listen, "",
          "OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, /v1/models, "
          "/health) on HOST:PORT; empty: off.");
ABSL_FLAG(int, http_threads, 2, "I/O threads of the HTTP front (each serves many connections).");
ABSL_FLAG(int64_t, http_max_body_bytes, int64_t{32} << 20,
          "Largest HTTP request body; larger ones get 413.");
ABSL_FLAG(absl::Duration, http_read_timeout, absl::Seconds(30),
          "An HTTP request must arrive whole within this long of its connection going idle.");
ABSL_FLAG(int, http_max_connections, 10000,
          "Open HTTP connections; more get 503. Lowered to the HTTP share of the open-file "
          "limit (docs/security.md).");
ABSL_FLAG(absl::Duration, http_request_timeout, absl::Minutes(10),
          "Deadline of an HTTP request without an x-pdserve-timeout-ms header.");
ABSL_FLAG(std::string, http_api_key_file, "",
          "File holding the API key HTTP clients must send (Authorization: Bearer KEY); empty: "
          "no key. /health needs none.");

ABSL_FLAG(std::string, registration_token_file, "",
          "File holding the cluster's registration token: workers must send it to register "
          "(their --registration_token_file). Empty: anyone who reaches the registry may.");

int main(int argc, char** argv) {
  pdserve::ShutdownSignal shutdown;
  pdserve::ParseCommandLine(
      argc, argv,
      "pdserve-router: request classification, offload decision and placement; relays tokens.\n"
      "Usage: pdserve-router --model=DIR[,DIR...] [--listen=HOST:PORT] [--policy=cost_model] ...");
  pdserve::router::RouterConfig config;
  config.model_dirs = absl::GetFlag(FLAGS_model);
  config.server.grpc.listen_address = absl::GetFlag(FLAGS_listen);
  config.server.internal_grpc.listen_address = absl::GetFlag(FLAGS_registry_listen);
  config.tls = pdserve::TlsConfigFromFlags();
  config.server.metrics_address = absl::GetFlag(FLAGS_metrics_listen);
  config.server.serving_info_path = absl::GetFlag(FLAGS_serving_info_path);
  config.server.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  config.report_timeout = absl::GetFlag(FLAGS_worker_timeout);
  config.cost_model_path = absl::GetFlag(FLAGS_cost_model);
  config.policy.name = absl::GetFlag(FLAGS_policy);
  config.policy.min_offload_tokens = absl::GetFlag(FLAGS_min_offload_tokens);
  config.policy.min_tpot_offload_tokens = absl::GetFlag(FLAGS_min_tpot_offload_tokens);
  config.policy.tpot_headroom = absl::GetFlag(FLAGS_tpot_headroom);
  config.policy.length_threshold = absl::GetFlag(FLAGS_length_threshold);
  config.policy.max_prefill_queue_ms =
      absl::ToDoubleMilliseconds(absl::GetFlag(FLAGS_max_prefill_queue));
  config.policy.alternates = absl::GetFlag(FLAGS_alternates);
  config.policy.slo.ttft_ms = absl::ToDoubleMilliseconds(absl::GetFlag(FLAGS_slo_ttft));
  config.policy.slo.tpot_ms = absl::ToDoubleMilliseconds(absl::GetFlag(FLAGS_slo_tpot));
  config.slo_classes = absl::GetFlag(FLAGS_slo_classes);
  config.generation.max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  config.generation.retry_after = absl::GetFlag(FLAGS_retry_after);
  config.generation.clients.max_share = absl::GetFlag(FLAGS_client_max_share);
  config.generation.clients.min_requests = absl::GetFlag(FLAGS_client_min_requests);
  config.generation.client_identity.header = absl::GetFlag(FLAGS_client_id_header);
  config.client_metrics_top = absl::GetFlag(FLAGS_client_metrics_top);
  config.verify_worker_addresses = absl::GetFlag(FLAGS_verify_worker_addresses);
  config.verify_timeout = absl::GetFlag(FLAGS_worker_verify_timeout);
  config.max_workers_per_peer = absl::GetFlag(FLAGS_max_workers_per_peer);
  config.worker_id_uri_prefix = absl::GetFlag(FLAGS_worker_id_uri_prefix);
  config.generation.tokenizer_threads = absl::GetFlag(FLAGS_tokenizer_threads);
  config.decision_log_size = absl::GetFlag(FLAGS_decision_log_size);
  const std::string rebalance = absl::GetFlag(FLAGS_rebalance);
  if (rebalance != "on" && rebalance != "off") {
    std::fprintf(stderr, "--rebalance: must be on or off, got '%s'\n", rebalance.c_str());
    return 2;
  }
  config.rebalance = rebalance == "on";
  config.rebalance_config = pdserve::router::RebalanceConfigFromFlags();
  config.generation.max_tokenize_queue = absl::GetFlag(FLAGS_max_tokenize_queue);
  config.generation.max_prompt_bytes = absl::GetFlag(FLAGS_max_prompt_bytes);
  config.generation.testing_read_delay = absl::GetFlag(FLAGS_testing_relay_read_delay);
  config.placer.max_waiting_per_worker = absl::GetFlag(FLAGS_max_waiting_per_worker);
  config.placer.balance_abs = absl::GetFlag(FLAGS_balance_abs);
  config.placer.balance_rel = absl::GetFlag(FLAGS_balance_rel);
  if (auto balance = pdserve::router::ParseDecodeBalance(absl::GetFlag(FLAGS_decode_balance),
                                                         "--decode_balance");
      balance.ok()) {
    config.placer.decode_balance = *balance;
  } else {
    std::fprintf(stderr, "%s\n", std::string(balance.status().message()).c_str());
    return 2;
  }
  config.http.http.listen_address = absl::GetFlag(FLAGS_http_listen);
  config.http.http.threads = absl::GetFlag(FLAGS_http_threads);
  config.http.http.max_body_bytes =
      static_cast<size_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_http_max_body_bytes)));
  config.http.http.read_timeout = absl::GetFlag(FLAGS_http_read_timeout);
  config.http.http.max_connections = absl::GetFlag(FLAGS_http_max_connections);
  config.http.request_timeout = absl::GetFlag(FLAGS_http_request_timeout);
  if (const std::string key_file = absl::GetFlag(FLAGS_http_api_key_file); !key_file.empty()) {
    auto key = pdserve::router::openai::ReadApiKeyFile(key_file);
    if (!key.ok()) {
      std::fprintf(stderr, "%s\n", std::string(key.status().message()).c_str());
      return 2;
    }
    config.http.api_key = *std::move(key);
  }
  if (const std::string file = absl::GetFlag(FLAGS_registration_token_file); !file.empty()) {
    auto token = pdserve::ReadSecretFile(file, "--registration_token_file");
    if (!token.ok()) {
      std::fprintf(stderr, "%s\n", std::string(token.status().message()).c_str());
      return 2;
    }
    config.registration_token = *std::move(token);
  }
  if (absl::Status s = config.Validate(); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto router = pdserve::router::Router::Create(config);
  if (!router.ok()) {
    PDS_LOG(ERROR) << router.status();
    return 1;
  }
  (*router)->Run(shutdown);
  return 0;
}
