// libFuzzer target: the safetensors header parser must turn any byte string into a header
// or an error, never a crash, hang or out-of-bounds read.
#include <cstddef>
#include <cstdint>

#include "engine/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto header = pdserve::engine::ParseSafetensorsHeader(bytes, size, "fuzz.safetensors");
  if (header.ok()) {
    // Every accepted tensor must lie inside the file.
    for (const auto& t : header->tensors) {
      if (header->data_offset + t.end > size) __builtin_trap();
    }
  }
  return 0;
}
