// libFuzzer target: the OpenAI-compatible front's handling of request bodies. The first byte
// picks the endpoint; the rest is the body. A body must be parsed or refused with a status; an
// accepted chat is rendered through a chat template that loops, slices and serializes the
// messages (client data is never template source); answers and errors are serialized with the
// body's bytes as model output (not valid UTF-8 is replaced, never fatal).
#include <cstddef>
#include <cstdint>

#include "router/openai/openai_protocol.h"
#include "text/chat_template.h"

namespace {

// Written for this target (real templates are their authors' and are not committed).
constexpr char kTemplateConfig[] = R"({"bos_token": "<s>", "chat_template":
  "{{ bos_token }}{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% if m.role == 'system' %}[SYS]{{ m.content | trim }}{% elif m.content is string and m.content.startswith('<') %}{{ m.content.split('>')[-1] }}{% else %}<{{ m.role }}>{{ m.content[::-1] | tojson }}{% endif %}{% endfor %}{{ ns.n }}{% if add_generation_prompt %}<assistant>{% endif %}"})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pdserve::router::openai;
  if (size == 0) return 0;
  static const auto* chat_template =
      pdserve::text::ChatTemplate::FromConfig(kTemplateConfig).value().release();
  const Endpoint endpoint = (data[0] & 1) ? Endpoint::kChatCompletions : Endpoint::kCompletions;
  const absl::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto parsed = ParseRequest(endpoint, body);
  if (!parsed.ok()) {
    ErrorBody(ErrorFromStatus(parsed.status()));
    return 0;
  }
  if (parsed->generate.has_chat()) {
    std::vector<pdserve::text::ChatMessage> messages;
    for (const auto& m : parsed->generate.chat().messages())
      messages.push_back({m.role(), m.content()});
    pdserve::text::jinja::RenderLimits limits;
    limits.max_output_bytes = 1 << 20;
    chat_template->Render(messages, true, {}, limits).IgnoreError();
  }
  pdserve::v1::GenerateResult result;
  result.mutable_placement()->set_reason(std::string(body.substr(0, 32)));
  ResponseWriter writer(endpoint, "id", parsed->generate.model(), 0, parsed->include_usage);
  writer.TextEvent(body);
  writer.FinalEvents(result, parsed->generate.request_id());
  writer.Body(std::string(body), result, "id");
  return 0;
}
