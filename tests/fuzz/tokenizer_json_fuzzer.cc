// libFuzzer target: loading tokenizer.json must reject malformed input with a status; an
// accepted tokenizer must encode and decode text without crashing.
#include <cstddef>
#include <cstdint>

#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto tokenizer = pdserve::text::Tokenizer::FromJson(text);
  if (!tokenizer.ok()) return 0;
  auto ids = (*tokenizer)->Encode("Hello, wörld! 🦙 <|eot_id|>  \n\tend", true);
  if (ids.ok()) (*tokenizer)->Decode(*ids, false).IgnoreError();
  return 0;
}
