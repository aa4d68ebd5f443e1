#include "kvcache/block_hash.h"

#include <cstring>

#include "common/hash.h"

namespace pdserve::kvcache {

uint64_t BlockHash(uint64_t model_fingerprint, uint64_t parent, absl::Span<const int32_t> tokens) {
  uint64_t out;
  // The parent's bytes then the tokens', hashed in one pass where they fit a stack buffer
  // (blocks of up to 254 tokens); the same hash as streaming them.
  constexpr size_t kInline = 1024;
  const size_t bytes = sizeof(parent) + tokens.size() * sizeof(int32_t);
  if (bytes <= kInline) {
    uint8_t buffer[kInline];
    std::memcpy(buffer, &parent, sizeof(parent));
    if (!tokens.empty())
      std::memcpy(buffer + sizeof(parent), tokens.data(), tokens.size() * sizeof(int32_t));
    out = Xxh64(buffer, bytes, model_fingerprint);
  } else {
    Xxh64State h(model_fingerprint);
    h.Update(&parent, sizeof(parent));
    h.Update(tokens.data(), tokens.size() * sizeof(int32_t));
    out = h.Digest();
  }
  return out == 0 ? 1 : out;  // 0 means "no parent".
}

std::vector<uint64_t> FullBlockHashes(uint64_t model_fingerprint, absl::Span<const int32_t> tokens,
                                      int block_size) {
  std::vector<uint64_t> out;
  if (block_size > 0) out.reserve(tokens.size() / static_cast<size_t>(block_size));
  uint64_t parent = 0;
  for (size_t start = 0; start + block_size <= tokens.size(); start += block_size) {
    parent = BlockHash(model_fingerprint, parent, tokens.subspan(start, block_size));
    out.push_back(parent);
  }
  return out;
}

}  // namespace pdserve::kvcache
