// libFuzzer target: a chat template from a model directory must parse or be refused with a
// status naming the line, and a parsed one must render (or fail with a status) within its
// limits, never crash, hang or exhaust the stack.
#include <cstddef>
#include <cstdint>

#include "nlohmann/json.hpp"
#include "text/jinja/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pdserve::text::jinja;
  const absl::string_view source(reinterpret_cast<const char*>(data), size);
  auto parsed = Template::Parse(source);
  if (!parsed.ok()) return 0;
  static const Value* messages = new Value(Value::FromJson(nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "be brief"}, {"role": "user", "content": "héllo {{ x }}"},
          {"role": "assistant", "content": "<think>a</think>b"}])")));
  RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_steps = 100000;
  (*parsed)
      ->Render({{"messages", *messages},
                {"add_generation_prompt", Value(true)},
                {"bos_token", Value("<s>")}},
               limits)
      .IgnoreError();
  return 0;
}
