// Owns the blocks of the decode worker's KV pool: reference-counted allocation, a prefix
// cache of full blocks keyed by chained block hashes (kvcache/block_hash.h), and LRU eviction
// of cached blocks no sequence references.
//
// Every block is in exactly one state:
//   free         holds nothing
//   cached       in the prefix cache, referenced by no sequence (evictable, LRU ordered)
//   in use       referenced by at least one sequence (possibly also in the prefix cache)
//   reserved     held for an incoming KV transfer (offload), see Reserve/Unreserve
//   quarantined  a failed or cancelled transfer may still write it: unusable until released
// so that total == free + cached + in_use + reserved + quarantined, always; an idle worker
// returns to "all free or cached".
// Thread-safety: not thread-safe; owned by the scheduler loop.
#ifndef PDSERVE_KVCACHE_BLOCK_MANAGER_H_
#define PDSERVE_KVCACHE_BLOCK_MANAGER_H_

#include <cstdint>
#include <list>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace pdserve::kvcache {

struct BlockCounts {
  int total = 0;
  int free = 0;
  int cached = 0;
  int in_use = 0;
  int reserved = 0;
  int quarantined = 0;
};

// Prefix-cache changes since the last TakeEvents(), for the router's prefix index.
struct PrefixCacheEvents {
  std::vector<uint64_t> stored;
  std::vector<uint64_t> evicted;
};

class BlockManager {
 public:
  explicit BlockManager(int num_blocks);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  // Blocks an allocation can use now: free plus evictable cached.
  int available() const { return free_count_ + static_cast<int>(lru_.size()); }
  BlockCounts counts() const;

  // Longest run of cached blocks matching `hashes` from the start. Does not take them.
  int MatchPrefix(absl::Span<const uint64_t> hashes) const;
  // How many of the cached blocks of `hashes` (all matched by MatchPrefix) no sequence
  // references: taking them removes them from available().
  int EvictableAmong(absl::Span<const uint64_t> hashes) const;
  // Takes a reference on the cached blocks of the first `count` hashes (after MatchPrefix)
  // and appends their ids to `table`.
  void TakeCached(absl::Span<const uint64_t> hashes, int count, std::vector<int32_t>* table);

  // Allocates `count` blocks (free first, then evicting least recently used cached blocks),
  // appending their ids to `table`. Returns false and changes nothing if fewer are available.
  bool Allocate(int count, std::vector<int32_t>* table);
  // Drops one reference per id; blocks that reach zero become cached (if in the prefix
  // cache: most recently used first) or free.
  void Release(absl::Span<const int32_t> blocks);

  // Records that in-use block `block` now holds the full block with `hash` (its KV written).
  // If another block already caches this hash, nothing changes.
  void Publish(int32_t block, uint64_t hash);

  // Offload: blocks held for an incoming transfer are counted as reserved rather than in use.
  void MarkReserved(absl::Span<const int32_t> blocks, bool reserved);
  // Blocks a transfer may still write: their reference passes to quarantine; Unquarantine
  // releases them once the writer is known to have stopped.
  void Quarantine(absl::Span<const int32_t> blocks);
  void Unquarantine(absl::Span<const int32_t> blocks);

  PrefixCacheEvents TakeEvents();
  // Evicts every cached block no sequence holds (they become free; each an eviction event):
  // the pool's memory is about to hold something else. Returns how many.
  int DropCache();
  // Every hash currently cached (for a full resync with the router).
  std::vector<uint64_t> CachedHashes() const;

 private:
  struct Block {
    int refs = 0;
    uint64_t hash = 0;  // 0: not in the prefix cache.
    bool reserved = false;
    bool quarantined = false;
    std::list<int32_t>::iterator lru_it;
    bool in_lru = false;
  };
  void Evict(int32_t block);

  std::vector<Block> blocks_;
  std::vector<int32_t> free_;  // Stack of free block ids.
  int free_count_ = 0;
  std::list<int32_t> lru_;  // Cached, unreferenced; front = least recently used.
  absl::flat_hash_map<uint64_t, int32_t> cache_;
  PrefixCacheEvents events_;
  int reserved_ = 0;
  int quarantined_ = 0;
};

}  // namespace pdserve::kvcache

#endif  // PDSERVE_KVCACHE_BLOCK_MANAGER_H_
