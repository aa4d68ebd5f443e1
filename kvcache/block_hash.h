// Chained hashes of full KV blocks: block i's hash covers the model fingerprint, block
// i-1's hash and block i's token ids, so equal hashes mean equal prefixes (up to 64-bit
// collisions) and a block is only reusable after the same history. Decode workers key their
// prefix caches with them and report them to the router, which computes the same hashes
// from a request's tokens to find the worker holding the longest prefix.
// Thread-safety: stateless.
#ifndef PDSERVE_KVCACHE_BLOCK_HASH_H_
#define PDSERVE_KVCACHE_BLOCK_HASH_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace pdserve::kvcache {

// Hash of the block whose tokens are `tokens` (exactly one block) after `parent` (0 for the
// first block).
uint64_t BlockHash(uint64_t model_fingerprint, uint64_t parent, absl::Span<const int32_t> tokens);

// Hashes of every full block of `tokens` (a trailing partial block has none).
std::vector<uint64_t> FullBlockHashes(uint64_t model_fingerprint, absl::Span<const int32_t> tokens,
                                      int block_size);

}  // namespace pdserve::kvcache

#endif  // PDSERVE_KVCACHE_BLOCK_HASH_H_
