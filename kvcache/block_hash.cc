#include "kvcache/block_hash.h"

#include "common/hash.h"

namespace pdserve::kvcache {

uint64_t BlockHash(uint64_t model_fingerprint, uint64_t parent, absl::Span<const int32_t> tokens) {
  Xxh64State h(model_fingerprint);
  h.Update(&parent, sizeof(parent));
  h.Update(tokens.data(), tokens.size() * sizeof(int32_t));
  const uint64_t out = h.Digest();
  return out == 0 ? 1 : out;  // 0 means "no parent".
}

std::vector<uint64_t> FullBlockHashes(uint64_t model_fingerprint, absl::Span<const int32_t> tokens,
                                      int block_size) {
  std::vector<uint64_t> out;
  uint64_t parent = 0;
  for (size_t start = 0; start + block_size <= tokens.size(); start += block_size) {
    parent = BlockHash(model_fingerprint, parent, tokens.subspan(start, block_size));
    out.push_back(parent);
  }
  return out;
}

}  // namespace pdserve::kvcache
