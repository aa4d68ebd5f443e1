#include "router/openai/openai_protocol.h"

#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace pdserve::router::openai {
namespace {

using json = nlohmann::ordered_json;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// Text from the model or a client may not be valid UTF-8; JSON output replaces bad bytes
// with U+FFFD rather than failing.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A field that is absent or null is "not given".
const json* Given(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<int64_t>> OptionalInt(const json& body, const char* name) {
  const json* v = Given(body, name);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Invalid(name, "integer out of range");
    return static_cast<int64_t>(u);
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9.0e18) return static_cast<int64_t>(d);
  }
  return Invalid(name, absl::StrCat("must be an integer, not ", v->type_name()));
}

absl::StatusOr<std::optional<double>> OptionalNumber(const json& body, const char* name) {
  const json* v = Given(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return Invalid(name, absl::StrCat("must be a number, not ", v->type_name()));
  return v->get<double>();
}

absl::StatusOr<bool> OptionalBool(const json& body, const char* name, bool fallback) {
  const json* v = Given(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean())
    return Invalid(name, absl::StrCat("must be a boolean, not ", v->type_name()));
  return v->get<bool>();
}

absl::Status Unsupported(absl::string_view field, absl::string_view what) {
  return Invalid(field, absl::StrCat(what, " is not supported"));
}

// Parameters pdserve refuses rather than silently ignore: ignoring them would change what the
// client asked for.
absl::Status CheckUnsupported(const json& body, Endpoint endpoint) {
  ASSIGN_OR_RETURN(std::optional<int64_t> n, OptionalInt(body, "n"));
  if (n.has_value() && *n != 1)
    return Invalid("n", absl::StrCat(*n, " choices requested; only n=1 is supported"));
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    ASSIGN_OR_RETURN(std::optional<double> v, OptionalNumber(body, penalty));
    if (v.has_value() && *v != 0) return Unsupported(penalty, "a non-zero penalty");
  }
  ASSIGN_OR_RETURN(std::optional<double> repetition, OptionalNumber(body, "repetition_penalty"));
  if (repetition.has_value() && *repetition != 1)
    return Unsupported("repetition_penalty", "a penalty other than 1");
  ASSIGN_OR_RETURN(std::optional<int64_t> min_tokens, OptionalInt(body, "min_tokens"));
  if (min_tokens.has_value() && *min_tokens > 0) return Unsupported("min_tokens", "min_tokens > 0");
  if (const json* bias = Given(body, "logit_bias"); bias != nullptr && !bias->empty())
    return Unsupported("logit_bias", "logit_bias");
  if (const json* tools = Given(body, "tools"); tools != nullptr && !tools->empty())
    return Unsupported("tools", "tool calling");
  if (const json* functions = Given(body, "functions"); functions != nullptr && !functions->empty())
    return Unsupported("functions", "function calling");
  if (const json* format = Given(body, "response_format")) {
    const json* type = format->is_object() ? Given(*format, "type") : nullptr;
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "text")
      return Unsupported("response_format", "a response format other than text");
  }
  if (endpoint == Endpoint::kCompletions) {
    if (Given(body, "logprobs") != nullptr) return Unsupported("logprobs", "logprobs");
    ASSIGN_OR_RETURN(bool echo, OptionalBool(body, "echo", false));
    if (echo) return Unsupported("echo", "echo");
    ASSIGN_OR_RETURN(std::optional<int64_t> best_of, OptionalInt(body, "best_of"));
    if (best_of.has_value() && *best_of != 1) return Unsupported("best_of", "best_of > 1");
    if (const json* suffix = Given(body, "suffix");
        suffix != nullptr && !(suffix->is_string() && suffix->get<std::string>().empty()))
      return Unsupported("suffix", "suffix");
  } else {
    ASSIGN_OR_RETURN(bool logprobs, OptionalBool(body, "logprobs", false));
    if (logprobs) return Unsupported("logprobs", "logprobs");
    if (Given(body, "top_logprobs") != nullptr) return Unsupported("top_logprobs", "top_logprobs");
  }
  return absl::OkStatus();
}

absl::Status ParsePrompt(const json& body, v1::GenerateRequest* out) {
  const json* prompt = Given(body, "prompt");
  if (prompt == nullptr) return Invalid("prompt", "is required");
  const json* p = prompt;
  // A list of one prompt is that prompt; batches of several are not supported.
  if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
    if (p->size() != 1)
      return Invalid("prompt", absl::StrCat("a batch of ", p->size(),
                                            " prompts; send one prompt per request"));
    p = &p->front();
  }
  if (p->is_string()) {
    out->set_text(p->get<std::string>());
    return absl::OkStatus();
  }
  if (p->is_array()) {
    if (p->empty()) return Invalid("prompt", "must not be empty");
    for (size_t i = 0; i < p->size(); ++i) {
      const json& id = (*p)[i];
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<uint32_t>::max())
        return Invalid(absl::StrCat("prompt[", i, "]"), "token ids must be non-negative integers");
      out->mutable_token_ids()->add_ids(static_cast<uint32_t>(id.get<int64_t>()));
    }
    return absl::OkStatus();
  }
  return Invalid("prompt",
                 absl::StrCat("must be a string or a list of token ids, not ", p->type_name()));
}

absl::Status ParseMessages(const json& body, v1::GenerateRequest* out) {
  const json* messages = Given(body, "messages");
  if (messages == nullptr) return Invalid("messages", "is required");
  if (!messages->is_array()) return Invalid("messages", "must be a list of messages");
  v1::ChatPrompt* chat = out->mutable_chat();
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Invalid(field, "must be an object");
    const json* role = Given(m, "role");
    if (role == nullptr || !role->is_string()) return Invalid(field + ".role", "must be a string");
    if (const json* calls = Given(m, "tool_calls"); calls != nullptr && !calls->empty())
      return Unsupported(field + ".tool_calls", "tool calling");
    if (Given(m, "function_call") != nullptr)
      return Unsupported(field + ".function_call", "function calling");
    v1::ChatMessage* message = chat->add_messages();
    message->set_role(role->get<std::string>());
    const json* content = Given(m, "content");
    if (content == nullptr) continue;  // An assistant turn without text.
    if (content->is_string()) {
      message->set_content(content->get<std::string>());
      continue;
    }
    if (!content->is_array())
      return Invalid(field + ".content", "must be a string or a list of content parts");
    // Text parts joined by newlines (as vLLM's "string" content format does).
    std::string text;
    for (size_t k = 0; k < content->size(); ++k) {
      const json& part = (*content)[k];
      const std::string part_field = absl::StrCat(field, ".content[", k, "]");
      const json* type = part.is_object() ? Given(part, "type") : nullptr;
      if (type == nullptr || !type->is_string())
        return Invalid(part_field + ".type", "must be a string");
      if (type->get<std::string>() != "text") {
        return Unsupported(part_field + ".type",
                           absl::StrCat("content of type '", type->get<std::string>(), "'"));
      }
      const json* part_text = Given(part, "text");
      if (part_text == nullptr || !part_text->is_string())
        return Invalid(part_field + ".text", "must be a string");
      if (k > 0) text += "\n";
      text += part_text->get<std::string>();
    }
    message->set_content(std::move(text));
  }
  if (const json* kwargs = Given(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) return Invalid("chat_template_kwargs", "must be an object");
    chat->set_template_kwargs_json(Dump(*kwargs));
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const json& body, Endpoint endpoint, v1::SamplingParams* s) {
  ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, OptionalInt(body, "max_tokens"));
  ASSIGN_OR_RETURN(std::optional<int64_t> max_completion,
                   OptionalInt(body, "max_completion_tokens"));
  const char* max_field = max_completion.has_value() ? "max_completion_tokens" : "max_tokens";
  if (max_completion.has_value()) max_tokens = max_completion;
  if (max_tokens.has_value()) {
    if (*max_tokens < 1 || *max_tokens > std::numeric_limits<int32_t>::max())
      return Invalid(max_field, absl::StrCat(*max_tokens, " must be >= 1"));
    s->set_max_tokens(static_cast<int32_t>(*max_tokens));
  } else if (endpoint == Endpoint::kChatCompletions) {
    s->set_max_tokens_to_context(true);  // OpenAI's chat default: until the context is full.
  }
  ASSIGN_OR_RETURN(std::optional<double> temperature, OptionalNumber(body, "temperature"));
  if (temperature.has_value()) s->set_temperature(static_cast<float>(*temperature));
  ASSIGN_OR_RETURN(std::optional<double> top_p, OptionalNumber(body, "top_p"));
  if (top_p.has_value()) s->set_top_p(static_cast<float>(*top_p));
  ASSIGN_OR_RETURN(std::optional<int64_t> top_k, OptionalInt(body, "top_k"));
  if (top_k.has_value()) {
    if (*top_k < -1 || *top_k > std::numeric_limits<int32_t>::max())
      return Invalid("top_k", absl::StrCat(*top_k, " must be -1 or 0 (disabled) or >= 1"));
    s->set_top_k(static_cast<int32_t>(*top_k));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> seed, OptionalInt(body, "seed"));
  if (seed.has_value()) s->set_seed(static_cast<uint64_t>(*seed));
  if (const json* stop = Given(body, "stop")) {
    if (stop->is_string()) {
      s->add_stop(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string())
          return Invalid(absl::StrCat("stop[", i, "]"), "must be a string");
        s->add_stop((*stop)[i].get<std::string>());
      }
    } else {
      return Invalid("stop", "must be a string or a list of strings");
    }
  }
  if (const json* ids = Given(body, "stop_token_ids")) {
    if (!ids->is_array()) return Invalid("stop_token_ids", "must be a list of token ids");
    for (size_t i = 0; i < ids->size(); ++i) {
      const json& id = (*ids)[i];
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<uint32_t>::max())
        return Invalid(absl::StrCat("stop_token_ids[", i, "]"), "must be a non-negative integer");
      s->add_stop_token_ids(static_cast<uint32_t>(id.get<int64_t>()));
    }
  }
  ASSIGN_OR_RETURN(bool ignore_eos, OptionalBool(body, "ignore_eos", false));
  s->set_ignore_eos(ignore_eos);
  return absl::OkStatus();
}

// The request's "pdserve" object: its service-level objectives (GenerateRequest.objectives),
// which the router checks (ranges, known class) as for gRPC.
absl::Status ParseObjectives(const json& body, v1::GenerateRequest* request) {
  const json* ext = Given(body, "pdserve");
  if (ext == nullptr) return absl::OkStatus();
  if (!ext->is_object()) return Invalid("pdserve", "must be an object");
  v1::Objectives* objectives = request->mutable_objectives();
  if (const json* c = Given(*ext, "slo_class")) {
    if (!c->is_string()) return Invalid("pdserve.slo_class", "must be a string");
    objectives->set_slo_class(c->get<std::string>());
  }
  for (const char* name : {"ttft_ms", "tpot_ms"}) {
    const json* v = Given(*ext, name);
    if (v == nullptr) continue;
    if (!v->is_number()) {
      return Invalid(absl::StrCat("pdserve.", name),
                     absl::StrCat("must be a number, not ", v->type_name()));
    }
    (std::string(name) == "ttft_ms" ? objectives->set_ttft_ms(v->get<double>())
                                    : objectives->set_tpot_ms(v->get<double>()));
  }
  return absl::OkStatus();
}

// Generation's field names (as its errors name them) -> OpenAI's parameters.
std::string OpenAiParam(absl::string_view field, Endpoint endpoint) {
  const char* prompt = endpoint == Endpoint::kChatCompletions ? "messages" : "prompt";
  if (absl::StartsWith(field, "prompt.chat")) return "messages";
  if (absl::StartsWith(field, "prompt")) return prompt;
  if (absl::StartsWith(field, "sampling.")) return std::string(field.substr(9));
  if (field == "model" || field == "request_id") return std::string(field);
  if (absl::StartsWith(field, "objectives.")) return absl::StrCat("pdserve.", field.substr(11));
  if (field == "pdserve" || absl::StartsWith(field, "pdserve.")) return std::string(field);
  return "";
}

json Usage(const v1::GenerateResult& result) {
  const auto& u = result.usage();
  return json{{"prompt_tokens", u.prompt_tokens()},
              {"completion_tokens", u.completion_tokens()},
              {"total_tokens", u.prompt_tokens() + u.completion_tokens()},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens()}}}};
}

const char* ModeName(v1::PlacementMode mode) {
  switch (mode) {
    case v1::PLACEMENT_MODE_LOCAL:
      return "local";
    case v1::PLACEMENT_MODE_OFFLOAD:
      return "offload";
    default:
      return "unspecified";
  }
}

// The documented "pdserve" field: where the request ran, why, and how long each stage took.
json Extension(const v1::GenerateResult& result, const std::string& request_id) {
  const v1::Placement& p = result.placement();
  const v1::StageTimings& t = result.timings();
  return json{{"request_id", request_id},
              {"placement",
               {{"mode", ModeName(p.mode())},
                {"reason", p.reason()},
                {"policy", p.policy()},
                {"decode_worker", p.decode_worker_id()},
                {"prefill_worker", p.prefill_worker_id()},
                {"fell_back_to_local", p.fell_back_to_local()},
                {"fallback_cause", p.fallback_cause()}}},
              {"timings_ms",
               {{"router", t.router_ms()},
                {"queue", t.queue_ms()},
                {"prefill_queue", t.prefill_queue_ms()},
                {"prefill", t.prefill_ms()},
                {"offload_wait", t.offload_wait_ms()},
                {"transfer", t.transfer_ms()},
                {"transfer_tail", t.transfer_tail_ms()},
                {"ttft", t.ttft_ms()},
                {"decode", t.decode_ms()},
                {"e2e", t.e2e_ms()}}},
              {"stop_reason", result.stop_reason()}};
}

}  // namespace

std::string ErrorBody(const ApiError& e) {
  json error{{"message", e.message},
             {"type", e.type},
             {"param", e.param.empty() ? json(nullptr) : json(e.param)},
             {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return Dump(json{{"error", error}});
}

ApiError ErrorFromStatus(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  const size_t colon = e.message.find(": ");
  if (colon != std::string::npos && e.message.find(' ') > colon)
    e.param = e.message.substr(0, colon);
  if (e.param == "body") e.param.clear();  // The whole body: no parameter to name.
  return e;
}

ApiError ErrorFromGrpc(const grpc::Status& status, Endpoint endpoint, int64_t retry_after_ms) {
  ApiError e;
  e.message = status.error_message();
  const size_t colon = e.message.find(": ");
  if (colon != std::string::npos && e.message.find(' ') > colon)
    e.param = OpenAiParam(absl::string_view(e.message).substr(0, colon), endpoint);
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      e.http_status = 400;
      break;
    case grpc::StatusCode::NOT_FOUND:
      e.http_status = 404;
      e.param = "model";
      e.code = "model_not_found";
      break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      e.http_status = 429;
      e.type = "rate_limit_error";
      e.param.clear();
      break;
    case grpc::StatusCode::UNAVAILABLE:
      e.http_status = 503;
      e.type = "service_unavailable_error";
      e.param.clear();
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      e.http_status = 504;
      e.type = "timeout_error";
      e.param.clear();
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      e.param.clear();
  }
  if (retry_after_ms > 0 && (e.http_status == 429 || e.http_status == 503))
    e.retry_after_seconds = static_cast<int>((retry_after_ms + 999) / 1000);
  return e;
}

absl::StatusOr<ParsedRequest> ParseRequest(Endpoint endpoint, absl::string_view text) {
  const json body = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return Invalid("body", "is not valid JSON");
  if (!body.is_object()) return Invalid("body", "must be a JSON object");
  ParsedRequest out;
  out.endpoint = endpoint;
  if (const json* model = Given(body, "model")) {
    if (!model->is_string()) return Invalid("model", "must be a string");
    out.generate.set_model(model->get<std::string>());
  }
  RETURN_IF_ERROR(CheckUnsupported(body, endpoint));
  if (endpoint == Endpoint::kCompletions) {
    RETURN_IF_ERROR(ParsePrompt(body, &out.generate));
  } else {
    RETURN_IF_ERROR(ParseMessages(body, &out.generate));
  }
  RETURN_IF_ERROR(ParseSampling(body, endpoint, out.generate.mutable_sampling()));
  RETURN_IF_ERROR(ParseObjectives(body, &out.generate));
  ASSIGN_OR_RETURN(out.stream, OptionalBool(body, "stream", false));
  if (const json* options = Given(body, "stream_options")) {
    if (!out.stream) return Invalid("stream_options", "is only allowed when stream is true");
    if (!options->is_object()) return Invalid("stream_options", "must be an object");
    ASSIGN_OR_RETURN(out.include_usage, OptionalBool(*options, "include_usage", false));
  }
  return out;
}

ResponseWriter::ResponseWriter(Endpoint endpoint, std::string id, std::string model,
                               int64_t created, bool include_usage)
    : endpoint_(endpoint),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(created),
      include_usage_(include_usage) {}

std::string ResponseWriter::Chunk(const std::string& choices_json, const std::string& extra) const {
  // Built as text around the pieces: the envelope is the same for every chunk.
  const bool chat = endpoint_ == Endpoint::kChatCompletions;
  return absl::StrCat("data: {\"id\":", Dump(json(id_)), ",\"object\":\"",
                      chat ? "chat.completion.chunk" : "text_completion",
                      "\",\"created\":", created_, ",\"model\":", Dump(json(model_)),
                      ",\"choices\":", choices_json, extra, "}\n\n");
}

std::string ResponseWriter::TextEvent(absl::string_view text) {
  json choice;
  if (endpoint_ == Endpoint::kChatCompletions) {
    json delta = json::object();
    if (!role_sent_) delta["role"] = "assistant";
    role_sent_ = true;
    delta["content"] = std::string(text);
    choice =
        json{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  } else {
    choice = json{{"index", 0},
                  {"text", std::string(text)},
                  {"logprobs", nullptr},
                  {"finish_reason", nullptr}};
  }
  return Chunk(Dump(json::array({choice})), include_usage_ ? ",\"usage\":null" : "");
}

std::string ResponseWriter::FinalEvents(const v1::GenerateResult& result,
                                        const std::string& request_id) {
  json choice;
  if (endpoint_ == Endpoint::kChatCompletions) {
    json delta = json::object();
    if (!role_sent_) delta["role"] = "assistant";
    role_sent_ = true;
    choice = json{{"index", 0},
                  {"delta", delta},
                  {"logprobs", nullptr},
                  {"finish_reason", FinishReason(result)}};
  } else {
    choice = json{
        {"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", FinishReason(result)}};
  }
  std::string out = Chunk(Dump(json::array({choice})),
                          absl::StrCat(include_usage_ ? ",\"usage\":null" : "",
                                       ",\"pdserve\":", Dump(Extension(result, request_id))));
  if (include_usage_) out += Chunk("[]", absl::StrCat(",\"usage\":", Dump(Usage(result))));
  out += "data: [DONE]\n\n";
  return out;
}

std::string ResponseWriter::ErrorEvents(const ApiError& error) {
  return absl::StrCat("data: ", ErrorBody(error), "\n\ndata: [DONE]\n\n");
}

std::string ResponseWriter::Body(const std::string& text, const v1::GenerateResult& result,
                                 const std::string& request_id) const {
  const bool chat = endpoint_ == Endpoint::kChatCompletions;
  json choice;
  if (chat) {
    choice = json{{"index", 0},
                  {"message", {{"role", "assistant"}, {"content", text}}},
                  {"logprobs", nullptr},
                  {"finish_reason", FinishReason(result)}};
  } else {
    choice = json{{"index", 0},
                  {"text", text},
                  {"logprobs", nullptr},
                  {"finish_reason", FinishReason(result)}};
  }
  return Dump(json{{"id", id_},
                   {"object", chat ? "chat.completion" : "text_completion"},
                   {"created", created_},
                   {"model", model_},
                   {"choices", json::array({choice})},
                   {"usage", Usage(result)},
                   {"pdserve", Extension(result, request_id)}});
}

namespace {

json ModelObject(const v1::ModelInfo& m, int64_t created) {
  return json{{"id", m.name()},
              {"object", "model"},
              {"created", created},
              {"owned_by", "pdserve"},
              {"max_model_len", m.max_context_tokens()}};
}

}  // namespace

std::string ModelsBody(const v1::ListModelsResponse& models, int64_t created) {
  json data = json::array();
  for (const auto& m : models.models()) data.push_back(ModelObject(m, created));
  return Dump(json{{"object", "list"}, {"data", data}});
}

std::optional<std::string> ModelBody(const v1::ListModelsResponse& models, absl::string_view id,
                                     int64_t created) {
  for (const auto& m : models.models()) {
    if (m.name() == id) return Dump(ModelObject(m, created));
  }
  return std::nullopt;
}

std::string FinishReason(const v1::GenerateResult& result) {
  return result.finish_reason() == v1::FINISH_REASON_LENGTH ? "length" : "stop";
}

}  // namespace pdserve::router::openai
