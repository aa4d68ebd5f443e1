// The OpenAI API's wire shapes, translated to and from pdserve's Generation API: request bodies
// of POST /v1/completions and /v1/chat/completions into a GenerateRequest (unsupported
// parameters refused by name), gRPC statuses into OpenAI's error object and HTTP status, and
// results into response bodies and server-sent-event chunks. pdserve's own figures (placement,
// stage timings) travel in a "pdserve" field of the final chunk or response.
// Thread-safety: stateless, except ResponseWriter, which one request uses at a time.
#ifndef PDSERVE_ROUTER_OPENAI_OPENAI_PROTOCOL_H_
#define PDSERVE_ROUTER_OPENAI_OPENAI_PROTOCOL_H_

#include <grpcpp/support/status.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pdserve/v1/generation.pb.h"

namespace pdserve::router::openai {

enum class Endpoint { kCompletions, kChatCompletions };

// OpenAI's error object and the HTTP status that carries it.
struct ApiError {
  int http_status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // The request field at fault; empty: null.
  std::string code;   // e.g. "model_not_found"; empty: null.
  // Seconds for a Retry-After header (429, 503); 0: none.
  int retry_after_seconds = 0;
};

// {"error": {"message", "type", "param", "code"}}
std::string ErrorBody(const ApiError& error);
// A failed parse: INVALID_ARGUMENT "field: what" -> 400 with param = field.
ApiError ErrorFromStatus(const absl::Status& status);
// The router's answer: the code's HTTP status (400, 404, 429, 503, 504, 500), the field a
// Generation error names mapped to the OpenAI parameter, and `retry_after_ms` (the router's
// retry-after-ms trailer, 0 if absent) as Retry-After seconds.
ApiError ErrorFromGrpc(const grpc::Status& status, Endpoint endpoint, int64_t retry_after_ms);

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  v1::GenerateRequest generate;  // request_id left empty: the caller sets it.
  bool stream = false;
  bool include_usage = false;
};

// Parses and checks a request body. INVALID_ARGUMENT "field: what" naming the OpenAI field:
// malformed JSON, wrong types, n != 1, and parameters pdserve does not support (logprobs,
// echo, best_of > 1, suffix, penalties, logit_bias, tools, response formats other than text,
// non-text message content). Value ranges the router checks itself (temperature >= 0,
// top_p in (0, 1], stop strings, context length) are left to it, so both APIs say the same.
absl::StatusOr<ParsedRequest> ParseRequest(Endpoint endpoint, absl::string_view body);

// Builds one request's response: the whole body, or its stream of events.
class ResponseWriter {
 public:
  // `id` is the response's id (cmpl-/chatcmpl- + the request id); `created` Unix seconds.
  ResponseWriter(Endpoint endpoint, std::string id, std::string model, int64_t created,
                 bool include_usage);

  // "data: {chunk}\n\n" with `text` (the first chat chunk also carries the role).
  std::string TextEvent(absl::string_view text);
  // The last events: the chunk with finish_reason (and the "pdserve" field), the usage chunk
  // when asked for, and "data: [DONE]".
  std::string FinalEvents(const v1::GenerateResult& result, const std::string& request_id);
  // An error after the stream began: an error event, then "data: [DONE]".
  static std::string ErrorEvents(const ApiError& error);
  // The non-streaming body.
  std::string Body(const std::string& text, const v1::GenerateResult& result,
                   const std::string& request_id) const;

 private:
  std::string Chunk(const std::string& choices_json, const std::string& extra) const;

  const Endpoint endpoint_;
  const std::string id_;
  const std::string model_;
  const int64_t created_;
  const bool include_usage_;
  bool role_sent_ = false;
};

// GET /v1/models.
std::string ModelsBody(const v1::ListModelsResponse& models, int64_t created);
// GET /v1/models/{id}: the model object, or nullopt when no model has that id.
std::optional<std::string> ModelBody(const v1::ListModelsResponse& models, absl::string_view id,
                                     int64_t created);
// "stop" or "length" (OpenAI's finish reasons) for a generation result.
std::string FinishReason(const v1::GenerateResult& result);

}  // namespace pdserve::router::openai

#endif  // PDSERVE_ROUTER_OPENAI_OPENAI_PROTOCOL_H_
