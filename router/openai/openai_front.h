// The router's OpenAI-compatible HTTP front: POST /v1/completions and /v1/chat/completions
// (whole or streamed as server-sent events), GET /v1/models and GET /health. Each request is
// translated (openai_protocol.h) and sent to the router's own Generation service over an
// in-process gRPC channel, so it is validated, admitted, tokenized, placed, relayed, timed
// and counted exactly as a gRPC client's request is; a client that disconnects cancels its
// call, which cancels the work on every worker.
//
// With an API key configured, requests must carry it as a bearer token (GET /health excepted:
// probes carry none). Per request: an x-request-id header sets the request id; x-pdserve-timeout-ms
// sets its deadline (default --http_request_timeout). A stream's headers are sent with its first
// tokens, so errors before them (validation, overload, no worker) are ordinary HTTP errors;
// one written tokens are ended by an error event.
// Thread-safety: Start/StopAccepting/Stop from one thread; requests run on the HTTP server's
// I/O threads and gRPC's callback threads.
#ifndef PDSERVE_ROUTER_OPENAI_OPENAI_FRONT_H_
#define PDSERVE_ROUTER_OPENAI_OPENAI_FRONT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pdserve/v1/generation.grpc.pb.h"
#include "router/client_identity.h"
#include "router/openai/http_server.h"
#include "router/router_metrics.h"

namespace pdserve::router::openai {

struct OpenAiFrontConfig {
  HttpServerConfig http;
  // Deadline of a request that does not set x-pdserve-timeout-ms. Default 10 min (what the
  // OpenAI SDKs wait by default).
  absl::Duration request_timeout = absl::Minutes(10);
  // When set, every request but GET /health must carry "Authorization: Bearer <api_key>"
  // (OpenAI clients send their api key so); others get 401. Empty (default): no check.
  std::string api_key;
  // Who each HTTP client is, for per-client admission: `header`'s value when set and sent,
  // else the client's IP address; passed to the Generation service with `front_secret`.
  ClientIdentityConfig client_identity;

  absl::Status Validate() const;
};

// The key in `path` (one line; surrounding whitespace dropped). Errors name
// --http_api_key_file: unreadable, empty, or not printable ASCII.
absl::StatusOr<std::string> ReadApiKeyFile(const std::string& path);

class OpenAiFront {
 public:
  // `channel` reaches the router's Generation service; `ready` answers GET /health (a decode
  // worker is registered).
  static absl::StatusOr<std::unique_ptr<OpenAiFront>> Start(const OpenAiFrontConfig& config,
                                                            std::shared_ptr<grpc::Channel> channel,
                                                            std::function<bool()> ready,
                                                            RouterMetrics* metrics);
  ~OpenAiFront();

  const std::string& address() const { return address_; }
  // Requests being answered.
  int active_requests() const;

  // New connections are refused; open ones are served until they end.
  void StopAccepting();
  // Waits until no request is being answered, or `deadline`; true if none is.
  bool WaitIdle(absl::Time deadline);
  // Waits up to `timeout` until no request is being answered, then closes every connection
  // and stops the I/O threads. Call it once the router's gRPC server has stopped (then every
  // call ends at once). False when requests were still running: the front must then not be
  // destroyed (their gRPC callbacks still use it).
  bool Stop(absl::Duration timeout);

 private:
  class GenerateCall;
  OpenAiFront() = default;
  void Handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange);
  void HandleGenerate(const HttpRequest& request, const std::string& path,
                      std::shared_ptr<HttpExchange> exchange);
  // GET /v1/models, or GET /v1/models/{id} when `id` is set.
  void HandleModels(std::shared_ptr<HttpExchange> exchange, std::optional<std::string> id = {});
  void Count(const std::string& path, int status);

  OpenAiFrontConfig config_;
  std::unique_ptr<v1::Generation::Stub> stub_;
  std::function<bool()> ready_;
  RouterMetrics* metrics_ = nullptr;
  mutable absl::Mutex mu_;
  absl::CondVar idle_;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  std::string address_;
  std::unique_ptr<HttpServer> server_;  // Last: stopped before the rest goes.
};

}  // namespace pdserve::router::openai

#endif  // PDSERVE_ROUTER_OPENAI_OPENAI_FRONT_H_
