// The OpenAI wire shapes: request bodies into GenerateRequests (every refusal names its
// field), gRPC statuses into HTTP statuses and OpenAI error objects, results into bodies and
// server-sent events.
#include "router/openai/openai_protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace pdserve::router::openai {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

TEST(OpenAiParseTest, CompletionsBecomeGenerateRequests) {
  auto parsed = ParseRequest(Endpoint::kCompletions, R"({
      "model": "tiny", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
      "top_k": 20, "seed": 42, "stop": ["\n", "END"], "ignore_eos": true, "stream": true,
      "stream_options": {"include_usage": true}, "user": "ignored", "n": 1, "logprobs": null})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const v1::GenerateRequest& r = parsed->generate;
  EXPECT_EQ(r.model(), "tiny");
  EXPECT_EQ(r.text(), "Hello");
  EXPECT_EQ(r.sampling().max_tokens(), 7);
  EXPECT_FLOAT_EQ(r.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(r.sampling().top_p(), 0.9f);
  EXPECT_EQ(r.sampling().top_k(), 20);
  EXPECT_EQ(r.sampling().seed(), 42u);
  ASSERT_EQ(r.sampling().stop_size(), 2);
  EXPECT_EQ(r.sampling().stop(1), "END");
  EXPECT_TRUE(r.sampling().ignore_eos());
  EXPECT_FALSE(r.sampling().max_tokens_to_context());
  EXPECT_TRUE(parsed->stream);
  EXPECT_TRUE(parsed->include_usage);

  // A list of one prompt, and token ids (plain and nested).
  parsed = ParseRequest(Endpoint::kCompletions, R"({"prompt": ["only one"]})");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->generate.text(), "only one");
  parsed = ParseRequest(Endpoint::kCompletions, R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->generate.token_ids().ids_size(), 3);
  parsed = ParseRequest(Endpoint::kCompletions, R"({"prompt": [[5, 6]]})");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->generate.token_ids().ids(1), 6u);
  // Unset values keep their defaults (16 tokens for completions, as OpenAI).
  parsed = ParseRequest(Endpoint::kCompletions, R"({"prompt": "x", "temperature": null})");
  ASSERT_TRUE(parsed.ok());
  EXPECT_FALSE(parsed->generate.sampling().has_max_tokens());
  EXPECT_FALSE(parsed->generate.sampling().has_temperature());
  EXPECT_FALSE(parsed->stream);
}

TEST(OpenAiParseTest, ChatsBecomeChatPrompts) {
  auto parsed = ParseRequest(Endpoint::kChatCompletions, R"({
      "model": "tiny",
      "messages": [{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": [{"type": "text", "text": "one"},
                                                {"type": "text", "text": "two"}]},
                   {"role": "assistant", "content": null},
                   {"role": "user", "content": "go", "name": "ignored"}],
      "max_completion_tokens": 9, "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const v1::ChatPrompt& chat = parsed->generate.chat();
  ASSERT_EQ(chat.messages_size(), 4);
  EXPECT_EQ(chat.messages(0).role(), "system");
  EXPECT_EQ(chat.messages(1).content(), "one\ntwo");  // Text parts joined by newlines.
  EXPECT_EQ(chat.messages(2).content(), "");
  EXPECT_EQ(json::parse(chat.template_kwargs_json()), json::parse(R"({"enable_thinking": false})"));
  EXPECT_EQ(parsed->generate.sampling().max_tokens(), 9);
  // OpenAI's chat default without max_tokens: until the context is full.
  parsed = ParseRequest(Endpoint::kChatCompletions,
                        R"({"messages": [{"role": "user", "content": "x"}]})");
  ASSERT_TRUE(parsed.ok());
  EXPECT_FALSE(parsed->generate.sampling().has_max_tokens());
  EXPECT_TRUE(parsed->generate.sampling().max_tokens_to_context());
}

// The "pdserve" extension carries the request's objectives; the router's refusal of a bad
// one names the OpenAI-side field.
TEST(OpenAiParseTest, ObjectivesRideInThePdserveField) {
  auto parsed = ParseRequest(Endpoint::kCompletions, R"({"prompt": "x",
      "pdserve": {"slo_class": "interactive", "ttft_ms": 500, "tpot_ms": 40.5}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->generate.objectives().slo_class(), "interactive");
  EXPECT_EQ(parsed->generate.objectives().ttft_ms(), 500);
  EXPECT_EQ(parsed->generate.objectives().tpot_ms(), 40.5);
  parsed = ParseRequest(Endpoint::kCompletions, R"({"prompt": "x"})");
  ASSERT_TRUE(parsed.ok());
  EXPECT_FALSE(parsed->generate.has_objectives());
  const ApiError error =
      ErrorFromGrpc(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "objectives.slo_class: 'gold' is not a class of this router"),
                    Endpoint::kCompletions, 0);
  EXPECT_EQ(error.http_status, 400);
  EXPECT_EQ(error.param, "pdserve.slo_class");
}

TEST(OpenAiParseTest, RefusalsNameTheField) {
  struct Bad {
    Endpoint endpoint;
    const char* body;
    const char* message;
  };
  const Endpoint kC = Endpoint::kCompletions, kChat = Endpoint::kChatCompletions;
  const Bad cases[] = {
      {kC, "{not json", "body: is not valid JSON"},
      {kC, "[1, 2]", "body: must be a JSON object"},
      {kC, R"({"model": 3, "prompt": "x"})", "model: must be a string"},
      {kC, R"({})", "prompt: is required"},
      {kC, R"({"prompt": 5})", "prompt: must be a string or a list of token ids, not number"},
      {kC, R"({"prompt": ["a", "b"]})", "prompt: a batch of 2 prompts"},
      {kC, R"({"prompt": [1, -2]})", "prompt[1]: token ids must be non-negative integers"},
      {kC, R"({"prompt": "x", "max_tokens": "8"})", "max_tokens: must be an integer, not string"},
      {kC, R"({"prompt": "x", "max_tokens": 0})", "max_tokens: 0 must be >= 1"},
      {kC, R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens: must be an integer, not number"},
      {kC, R"({"prompt": "x", "temperature": "hot"})", "temperature: must be a number, not string"},
      {kC, R"({"prompt": "x", "stream": "yes"})", "stream: must be a boolean, not string"},
      {kC, R"({"prompt": "x", "stop": 3})", "stop: must be a string or a list of strings"},
      {kC, R"({"prompt": "x", "stop": ["a", 1]})", "stop[1]: must be a string"},
      {kC, R"({"prompt": "x", "n": 2})", "n: 2 choices requested; only n=1 is supported"},
      {kC, R"({"prompt": "x", "logprobs": 3})", "logprobs: logprobs is not supported"},
      {kC, R"({"prompt": "x", "echo": true})", "echo: echo is not supported"},
      {kC, R"({"prompt": "x", "best_of": 3})", "best_of: best_of > 1 is not supported"},
      {kC, R"({"prompt": "x", "suffix": "end"})", "suffix: suffix is not supported"},
      {kC, R"({"prompt": "x", "presence_penalty": 0.5})", "presence_penalty: a non-zero penalty"},
      {kC, R"({"prompt": "x", "logit_bias": {"1": 5}})", "logit_bias: logit_bias is not supported"},
      {kC, R"({"prompt": "x", "stream_options": {"include_usage": true}})",
       "stream_options: is only allowed when stream is true"},
      {kC, R"({"prompt": "x", "top_k": -5})", "top_k: -5 must be -1 or 0 (disabled) or >= 1"},
      {kChat, R"({"messages": "hi"})", "messages: must be a list of messages"},
      {kChat, R"({})", "messages: is required"},
      {kChat, R"({"messages": [{"content": "x"}]})", "messages[0].role: must be a string"},
      {kChat, R"({"messages": [{"role": "user", "content": 5}]})",
       "messages[0].content: must be a string or a list of content parts"},
      {kChat,
       R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       "messages[0].content[0].type: content of type 'image_url' is not supported"},
      {kChat, R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "1"}]}]})",
       "messages[0].tool_calls: tool calling is not supported"},
      {kChat, R"({"messages": [], "tools": [{"type": "function"}]})",
       "tools: tool calling is not supported"},
      {kChat, R"({"messages": [], "logprobs": true})", "logprobs: logprobs is not supported"},
      {kChat, R"({"messages": [], "response_format": {"type": "json_object"}})",
       "response_format: a response format other than text is not supported"},
      {kChat, R"({"messages": [], "chat_template_kwargs": [1]})",
       "chat_template_kwargs: must be an object"},
      {kC, R"({"prompt": "x", "pdserve": 3})", "pdserve: must be an object"},
      {kC, R"({"prompt": "x", "pdserve": {"slo_class": 1}})",
       "pdserve.slo_class: must be a string"},
      {kC, R"({"prompt": "x", "pdserve": {"ttft_ms": "fast"}})",
       "pdserve.ttft_ms: must be a number, not string"},
  };
  for (const Bad& c : cases) {
    auto parsed = ParseRequest(c.endpoint, c.body);
    ASSERT_FALSE(parsed.ok()) << c.body;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.message)) << c.body;
    // The error object names the field as its param.
    const ApiError error = ErrorFromStatus(parsed.status());
    EXPECT_EQ(error.http_status, 400);
    const std::string field(
        absl::string_view(c.message).substr(0, std::string(c.message).find(':')));
    if (field != "body") {
      EXPECT_EQ(error.param, field) << c.body;
    }
  }
}

TEST(OpenAiErrorTest, GrpcStatusesBecomeHttpStatusesAndErrorObjects) {
  struct Case {
    grpc::StatusCode code;
    const char* message;
    int64_t retry_after_ms;
    int http_status;
    const char* type;
    const char* param;
    int retry_after_s;
  };
  const Case cases[] = {
      {grpc::StatusCode::INVALID_ARGUMENT, "sampling.temperature: -1 must be >= 0", 0, 400,
       "invalid_request_error", "temperature", 0},
      {grpc::StatusCode::INVALID_ARGUMENT, "prompt.text: 99 bytes, at most 10", 0, 400,
       "invalid_request_error", "messages", 0},
      {grpc::StatusCode::INVALID_ARGUMENT, "prompt.chat: chat template: roles", 0, 400,
       "invalid_request_error", "messages", 0},
      {grpc::StatusCode::NOT_FOUND, "model: 'x' is not served here", 0, 404,
       "invalid_request_error", "model", 0},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, "router overloaded: 1 requests in flight", 1200, 429,
       "rate_limit_error", "", 2},
      {grpc::StatusCode::UNAVAILABLE, "no decode worker can serve this request", 0, 503,
       "service_unavailable_error", "", 0},
      {grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded", 0, 504, "timeout_error", "", 0},
      {grpc::StatusCode::INTERNAL, "boom", 0, 500, "server_error", "", 0},
  };
  for (const Case& c : cases) {
    const ApiError e = ErrorFromGrpc(grpc::Status(c.code, c.message), Endpoint::kChatCompletions,
                                     c.retry_after_ms);
    EXPECT_EQ(e.http_status, c.http_status) << c.message;
    EXPECT_EQ(e.type, c.type) << c.message;
    EXPECT_EQ(e.param, c.param) << c.message;
    EXPECT_EQ(e.retry_after_seconds, c.retry_after_s) << c.message;
    const json body = json::parse(ErrorBody(e));
    EXPECT_EQ(body["error"]["message"], c.message);
    EXPECT_EQ(body["error"]["type"], c.type);
    EXPECT_EQ(body["error"]["param"].is_null(), std::string(c.param).empty());
  }
  // In a completions request a prompt error names "prompt".
  EXPECT_EQ(
      ErrorFromGrpc(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "prompt: must not be empty"),
                    Endpoint::kCompletions, 0)
          .param,
      "prompt");
}

v1::GenerateResult Result() {
  v1::GenerateResult r;
  r.set_finish_reason(v1::FINISH_REASON_LENGTH);
  r.mutable_usage()->set_prompt_tokens(5);
  r.mutable_usage()->set_cached_prompt_tokens(2);
  r.mutable_usage()->set_completion_tokens(3);
  r.mutable_placement()->set_mode(v1::PLACEMENT_MODE_OFFLOAD);
  r.mutable_placement()->set_reason("interference_exceeds_transfer");
  r.mutable_timings()->set_ttft_ms(12.5);
  return r;
}

// The JSON payloads of "data: ..." events.
std::vector<std::string> Events(const std::string& sse) {
  std::vector<std::string> out;
  for (absl::string_view event : absl::StrSplit(sse, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
    out.emplace_back(event.substr(6));
  }
  return out;
}

TEST(OpenAiResponseTest, ChatStreamsCarryTheRoleOnceThenTextThenFinishUsageAndDone) {
  ResponseWriter writer(Endpoint::kChatCompletions, "chatcmpl-r1", "tiny", 1700000000, true);
  // One statement each: the operands of + are evaluated in no fixed order.
  std::string sse = writer.TextEvent("Hel");
  sse += writer.TextEvent("lo");
  sse += writer.FinalEvents(Result(), "r1");
  const auto events = Events(sse);
  ASSERT_EQ(events.size(), 5u);
  const json first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["id"], "chatcmpl-r1");
  EXPECT_EQ(first["created"], 1700000000);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "Hel");
  EXPECT_TRUE(first["usage"].is_null());
  const json second = json::parse(events[1]);
  EXPECT_FALSE(second["choices"][0]["delta"].contains("role"));
  const json final_chunk = json::parse(events[2]);
  EXPECT_EQ(final_chunk["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(final_chunk["pdserve"]["placement"]["mode"], "offload");
  EXPECT_EQ(final_chunk["pdserve"]["timings_ms"]["ttft"], 12.5);
  const json usage = json::parse(events[3]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 8);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(events[4], "[DONE]");
}

TEST(OpenAiResponseTest, CompletionBodiesAndInvalidUtf8) {
  ResponseWriter writer(Endpoint::kCompletions, "cmpl-r2", "tiny", 1, false);
  // A byte-level model can emit bytes that are not UTF-8: they become U+FFFD, not a failure.
  const json body = json::parse(writer.Body("ok\xff", Result(), "r2"));
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], "ok\xef\xbf\xbd");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 3);
  EXPECT_EQ(body["pdserve"]["request_id"], "r2");
  // Without include_usage there is no usage chunk and chunks carry no usage field.
  std::string sse = writer.TextEvent("a");
  sse += writer.FinalEvents(Result(), "r2");
  const auto events = Events(sse);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_FALSE(json::parse(events[0]).contains("usage"));
  EXPECT_EQ(json::parse(events[0])["choices"][0]["text"], "a");
  EXPECT_EQ(events[2], "[DONE]");
  // An error after the stream began is an error event, then [DONE].
  const auto error_events =
      Events(ResponseWriter::ErrorEvents(ApiError{503, "service_unavailable_error", "gone"}));
  ASSERT_EQ(error_events.size(), 2u);
  EXPECT_EQ(json::parse(error_events[0])["error"]["message"], "gone");
}

}  // namespace
}  // namespace pdserve::router::openai
