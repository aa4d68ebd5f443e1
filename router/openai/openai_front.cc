#include "router/openai/openai_front.h"

#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/retry_after.h"
#include "common/secret_file.h"
#include "router/openai/openai_protocol.h"
#include "wire/request_bridge.h"

namespace pdserve::router::openai {
namespace {

constexpr char kJson[] = "application/json";
constexpr absl::Duration kMaxTimeout = absl::Hours(24);

HttpHeaders JsonHeaders(const ApiError* error = nullptr) {
  HttpHeaders headers{{"Content-Type", kJson}};
  if (error != nullptr && error->retry_after_seconds > 0)
    headers.emplace_back("Retry-After", absl::StrCat(error->retry_after_seconds));
  return headers;
}

int64_t RetryAfterMs(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(kRetryAfterTrailer);
  int64_t ms = 0;
  if (it == trailers.end() ||
      !absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &ms))
    return 0;
  return ms;
}

}  // namespace

absl::StatusOr<std::string> ReadApiKeyFile(const std::string& path) {
  return ReadSecretFile(path, "--http_api_key_file");
}

absl::Status OpenAiFrontConfig::Validate() const {
  if (absl::Status s = http.Validate(); !s.ok()) return s;
  if (request_timeout <= absl::ZeroDuration() || request_timeout > kMaxTimeout)
    return absl::InvalidArgumentError("--http_request_timeout: must be in (0, 24h]");
  return absl::OkStatus();
}

// One completion: a Generation.Generate call whose messages become the HTTP answer. Owned by
// itself (self_) until gRPC is done with it; a disconnect callback holds it weakly.
class OpenAiFront::GenerateCall final : public grpc::ClientReadReactor<v1::GenerateResponse>,
                                        public std::enable_shared_from_this<GenerateCall> {
 public:
  GenerateCall(OpenAiFront* front, ParsedRequest parsed, std::string path,
               std::shared_ptr<HttpExchange> exchange, absl::Time deadline,
               const std::string& client)
      : front_(front),
        path_(std::move(path)),
        exchange_(std::move(exchange)),
        request_(std::move(parsed.generate)),
        stream_(parsed.stream),
        writer_(parsed.endpoint,
                absl::StrCat(parsed.endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-",
                             request_.request_id()),
                request_.model(), absl::ToUnixSeconds(absl::Now()), parsed.include_usage),
        endpoint_(parsed.endpoint) {
    context_.set_deadline(absl::ToChronoTime(deadline));
    if (!front_->config_.client_identity.front_secret.empty()) {
      context_.AddMetadata(kFrontSecretHeader, front_->config_.client_identity.front_secret);
      context_.AddMetadata(kFrontClientHeader, client);
    }
    absl::MutexLock lock(&front_->mu_);
    ++front_->active_;
  }

  ~GenerateCall() override {
    // The exchange holds an executor of the HTTP server's I/O context: let it go before the
    // front may stop that server.
    exchange_.reset();
    absl::MutexLock lock(&front_->mu_);
    if (--front_->active_ == 0) front_->idle_.SignalAll();
  }

  void Start() {
    self_ = shared_from_this();
    front_->stub_->async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
    std::weak_ptr<GenerateCall> weak = self_;
    exchange_->OnDisconnect([weak] {
      if (auto call = weak.lock()) call->context_.TryCancel();
    });
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // The stream ended; OnDone has the status.
    std::string events;
    if (!response_.text().empty()) {
      if (stream_) {
        events = writer_.TextEvent(response_.text());
      } else {
        text_ += response_.text();
      }
    }
    if (response_.has_result()) {
      result_ = response_.result();
      have_result_ = true;
      if (stream_) events += writer_.FinalEvents(result_, request_.request_id());
    }
    if (!stream_ || events.empty()) {
      StartRead(&response_);
      return;
    }
    // The next message is read once this one is written: a slow client slows its stream.
    AddHold();
    auto written = [self = self_](bool written_ok) {
      if (!written_ok) self->context_.TryCancel();  // The client is gone.
      self->StartRead(&self->response_);
      self->RemoveHold();
    };
    if (!started_) {
      started_ = true;
      exchange_->StartStream(200,
                             {{"Content-Type", "text/event-stream"},
                              {"Cache-Control", "no-cache"},
                              {"X-Request-Id", request_.request_id()}},
                             nullptr);
    }
    exchange_->Write(std::move(events), std::move(written));
  }

  void OnDone(const grpc::Status& status) override {
    int http_status = 200;
    if (status.ok() && have_result_) {
      if (stream_) {
        exchange_->EndStream();
      } else {
        exchange_->Respond(200, {{"Content-Type", kJson}, {"X-Request-Id", request_.request_id()}},
                           writer_.Body(text_, result_, request_.request_id()));
      }
    } else {
      ApiError error = status.ok()
                           ? ApiError{500, "server_error", "the generation ended without a result"}
                           : ErrorFromGrpc(status, endpoint_, RetryAfterMs(context_));
      http_status = error.http_status;
      if (started_) {
        exchange_->Write(ResponseWriter::ErrorEvents(error), nullptr);
        exchange_->EndStream();
      } else {
        exchange_->Respond(error.http_status, JsonHeaders(&error), ErrorBody(error));
      }
    }
    front_->Count(path_, status.error_code() == grpc::StatusCode::CANCELLED ? 499 : http_status);
    std::shared_ptr<GenerateCall> keep = std::move(self_);  // May be the last reference.
  }

 private:
  OpenAiFront* front_;
  const std::string path_;
  std::shared_ptr<HttpExchange> exchange_;
  grpc::ClientContext context_;
  v1::GenerateRequest request_;
  v1::GenerateResponse response_;
  const bool stream_;
  ResponseWriter writer_;
  const Endpoint endpoint_;
  std::string text_;  // Whole responses only.
  v1::GenerateResult result_;
  bool have_result_ = false;
  bool started_ = false;  // Stream headers sent.
  std::shared_ptr<GenerateCall> self_;
};

absl::StatusOr<std::unique_ptr<OpenAiFront>> OpenAiFront::Start(
    const OpenAiFrontConfig& config, std::shared_ptr<grpc::Channel> channel,
    std::function<bool()> ready, RouterMetrics* metrics) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  auto front = std::unique_ptr<OpenAiFront>(new OpenAiFront());
  front->config_ = config;
  front->stub_ = v1::Generation::NewStub(std::move(channel));
  front->ready_ = std::move(ready);
  front->metrics_ = metrics;
  HttpServerConfig http = config.http;
  if (metrics != nullptr) {
    prometheus::Gauge* open = &metrics->http_open_connections;
    http.on_open_connections = [open](int64_t n) { open->Set(static_cast<double>(n)); };
  }
  OpenAiFront* self = front.get();
  auto server =
      HttpServer::Start(http, [self](HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
        self->Handle(std::move(request), std::move(exchange));
      });
  if (!server.ok()) return server.status();
  front->server_ = *std::move(server);
  front->address_ = front->server_->address();
  PDS_LOG(INFO) << "OpenAI-compatible HTTP API at http://" << front->address_
                << (config.api_key.empty() ? "" : " (API key required)");
  if (auto host = ParseHostPort(config.http.listen_address, "--http_listen");
      host.ok() && !IsLoopbackHost(host->host)) {
    PDS_LOG(WARNING) << "the HTTP API is plaintext on " << front->address_
                     << ": terminate TLS in front of it (an ingress or a proxy) beyond a trusted "
                        "network (docs/security.md)";
  }
  return front;
}

OpenAiFront::~OpenAiFront() { Stop(absl::Seconds(30)); }

void OpenAiFront::Count(const std::string& path, int status) {
  if (metrics_ != nullptr) metrics_->HttpRequests(path, absl::StrCat(status)).Increment();
}

void OpenAiFront::Handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
  const std::string path = request.target.substr(0, request.target.find('?'));
  auto refuse = [&](int status, const std::string& message, HttpHeaders headers = {}) {
    ApiError error{status, status == 404 ? "not_found_error" : "invalid_request_error", message};
    HttpHeaders all = JsonHeaders();
    all.insert(all.end(), headers.begin(), headers.end());
    exchange->Respond(status, std::move(all), ErrorBody(error));
    Count(status == 404 ? "other" : path, status);
  };
  auto method_is = [&](const char* method) {
    if (request.method == method) return true;
    refuse(405, absl::StrCat("use ", method, " for ", path), {{"Allow", method}});
    return false;
  };
  if (!config_.api_key.empty() && path != "/health" &&
      !ConstantTimeEquals(request.Header("authorization"), "Bearer " + config_.api_key)) {
    ApiError error{401, "authentication_error",
                   "missing or wrong API key (Authorization: Bearer ...)", "", "invalid_api_key"};
    exchange->Respond(401, {{"Content-Type", kJson}, {"WWW-Authenticate", "Bearer"}},
                      ErrorBody(error));
    Count(path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/models"
              ? path
              : "other",
          401);
    return;
  }
  if (path == "/health") {
    if (!method_is("GET")) return;
    const bool ready = ready_();
    exchange->Respond(
        ready ? 200 : 503, JsonHeaders(),
        ready ? R"({"status": "ok"})" : R"({"status": "no decode worker registered"})");
    Count(path, ready ? 200 : 503);
  } else if (path == "/v1/models") {
    if (method_is("GET")) HandleModels(std::move(exchange));
  } else if (absl::StartsWith(path, "/v1/models/") && path.size() > 11) {
    if (method_is("GET")) HandleModels(std::move(exchange), path.substr(11));
  } else if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (method_is("POST")) HandleGenerate(request, path, std::move(exchange));
  } else {
    refuse(404, absl::StrCat("no such endpoint: ", request.method, " ", path,
                             " (pdserve serves /v1/completions, /v1/chat/completions, /v1/models, "
                             "/health)"));
  }
}

void OpenAiFront::HandleGenerate(const HttpRequest& request, const std::string& path,
                                 std::shared_ptr<HttpExchange> exchange) {
  const Endpoint endpoint =
      path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChatCompletions;
  auto fail = [&](const ApiError& error) {
    exchange->Respond(error.http_status, JsonHeaders(&error), ErrorBody(error));
    Count(path, error.http_status);
  };
  absl::StatusOr<ParsedRequest> parsed = ParseRequest(endpoint, request.body);
  if (!parsed.ok()) return fail(ErrorFromStatus(parsed.status()));
  absl::Duration timeout = config_.request_timeout;
  if (const std::string header = request.Header("x-pdserve-timeout-ms"); !header.empty()) {
    int64_t ms = 0;
    if (!absl::SimpleAtoi(header, &ms) || ms < 1 || absl::Milliseconds(ms) > kMaxTimeout) {
      return fail(ApiError{400, "invalid_request_error",
                           "x-pdserve-timeout-ms: must be an integer in [1, 86400000]",
                           "x-pdserve-timeout-ms"});
    }
    timeout = absl::Milliseconds(ms);
  }
  std::string request_id = request.Header("x-request-id");
  parsed->generate.set_request_id(request_id.empty() ? wire::NewRequestId() : request_id);
  const std::string& id_header = config_.client_identity.header;
  const std::string named = id_header.empty() ? "" : request.Header(id_header);
  const std::string client =
      !named.empty()
          ? ClientName("id", named)
          : ClientName("addr", request.peer_address.empty() ? "unknown" : request.peer_address);
  auto call = std::make_shared<GenerateCall>(this, *std::move(parsed), path, std::move(exchange),
                                             absl::Now() + timeout, client);
  call->Start();
}

void OpenAiFront::HandleModels(std::shared_ptr<HttpExchange> exchange,
                               std::optional<std::string> id) {
  struct Call {
    grpc::ClientContext context;
    v1::ListModelsRequest request;
    v1::ListModelsResponse response;
  };
  auto call = std::make_shared<Call>();
  call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  stub_->async()->ListModels(
      &call->context, &call->request, &call->response,
      [this, call, exchange, id](grpc::Status status) {
        if (!status.ok()) {
          const ApiError error = ErrorFromGrpc(status, Endpoint::kCompletions, 0);
          exchange->Respond(error.http_status, JsonHeaders(&error), ErrorBody(error));
          Count("/v1/models", error.http_status);
          return;
        }
        const int64_t now = absl::ToUnixSeconds(absl::Now());
        if (id.has_value()) {
          std::optional<std::string> model = ModelBody(call->response, *id, now);
          if (!model.has_value()) {
            const ApiError error{
                404, "not_found_error",
                absl::StrCat("The model '", id->substr(0, 256), "' does not exist"), "model",
                "model_not_found"};
            exchange->Respond(404, JsonHeaders(&error), ErrorBody(error));
            Count("/v1/models", 404);
            return;
          }
          exchange->Respond(200, JsonHeaders(), *model);
          Count("/v1/models", 200);
          return;
        }
        exchange->Respond(200, JsonHeaders(), ModelsBody(call->response, now));
        Count("/v1/models", 200);
      });
}

void OpenAiFront::StopAccepting() {
  if (server_ != nullptr) server_->StopAccepting();
}

bool OpenAiFront::WaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (active_ > 0) {
    if (idle_.WaitWithDeadline(&mu_, deadline)) break;
  }
  return active_ == 0;
}

int OpenAiFront::active_requests() const {
  absl::MutexLock lock(&mu_);
  return active_;
}

bool OpenAiFront::Stop(absl::Duration timeout) {
  if (server_ == nullptr) return true;
  server_->StopAccepting();
  {
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    while (active_ > 0) {
      if (idle_.WaitWithDeadline(&mu_, deadline)) break;
    }
    if (active_ > 0) {
      PDS_LOG(ERROR) << active_ << " HTTP requests still running after "
                     << absl::FormatDuration(timeout) << " at shutdown";
      return false;
    }
  }
  server_->Stop();
  server_.reset();
  return true;
}

}  // namespace pdserve::router::openai
