#include "kvcache/block_manager.h"

#include "common/logging.h"

namespace pdserve::kvcache {

BlockManager::BlockManager(int num_blocks) : blocks_(num_blocks) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
  free_count_ = num_blocks;
}

BlockCounts BlockManager::counts() const {
  BlockCounts c;
  c.total = num_blocks();
  c.free = free_count_;
  c.cached = static_cast<int>(lru_.size());
  c.reserved = reserved_;
  c.quarantined = quarantined_;
  c.in_use = c.total - c.free - c.cached - c.reserved - c.quarantined;
  return c;
}

int BlockManager::MatchPrefix(absl::Span<const uint64_t> hashes) const {
  int n = 0;
  for (uint64_t h : hashes) {
    auto it = cache_.find(h);
    if (it == cache_.end() || blocks_[it->second].quarantined) break;
    ++n;
  }
  return n;
}

int BlockManager::EvictableAmong(absl::Span<const uint64_t> hashes) const {
  int n = 0;
  for (uint64_t h : hashes) n += blocks_[cache_.at(h)].in_lru ? 1 : 0;
  return n;
}

void BlockManager::TakeCached(absl::Span<const uint64_t> hashes, int count,
                              std::vector<int32_t>* table) {
  for (int i = 0; i < count; ++i) {
    const int32_t b = cache_.at(hashes[i]);
    Block& block = blocks_[b];
    if (block.in_lru) {
      lru_.erase(block.lru_it);
      block.in_lru = false;
    }
    ++block.refs;
    table->push_back(b);
  }
}

void BlockManager::Evict(int32_t b) {
  Block& block = blocks_[b];
  PDS_CHECK(block.in_lru && block.refs == 0);
  lru_.erase(block.lru_it);
  block.in_lru = false;
  cache_.erase(block.hash);
  events_.evicted.push_back(block.hash);
  block.hash = 0;
}

bool BlockManager::Allocate(int count, std::vector<int32_t>* table) {
  if (count > available()) return false;
  for (int i = 0; i < count; ++i) {
    int32_t b;
    if (free_count_ > 0) {
      b = free_.back();
      free_.pop_back();
      --free_count_;
    } else {
      b = lru_.front();
      Evict(b);
    }
    blocks_[b].refs = 1;
    table->push_back(b);
  }
  return true;
}

void BlockManager::Release(absl::Span<const int32_t> ids) {
  for (int32_t b : ids) {
    Block& block = blocks_[b];
    PDS_CHECK(block.refs > 0) << "block " << b << " released more often than taken";
    if (--block.refs > 0) continue;
    if (block.reserved) {
      block.reserved = false;
      --reserved_;
    }
    if (block.hash != 0) {
      block.lru_it = lru_.insert(lru_.end(), b);
      block.in_lru = true;
    } else {
      free_.push_back(b);
      ++free_count_;
    }
  }
}

void BlockManager::Publish(int32_t b, uint64_t hash) {
  Block& block = blocks_[b];
  if (block.hash != 0 || cache_.contains(hash)) return;
  block.hash = hash;
  cache_[hash] = b;
  events_.stored.push_back(hash);
}

void BlockManager::MarkReserved(absl::Span<const int32_t> ids, bool reserved) {
  for (int32_t b : ids) {
    Block& block = blocks_[b];
    if (block.reserved == reserved) continue;
    block.reserved = reserved;
    reserved_ += reserved ? 1 : -1;
  }
}

void BlockManager::Quarantine(absl::Span<const int32_t> ids) {
  for (int32_t b : ids) {
    Block& block = blocks_[b];
    if (block.reserved) {
      block.reserved = false;
      --reserved_;
    }
    if (block.quarantined) continue;
    block.quarantined = true;
    ++quarantined_;
    // Whatever was written may be garbage: never serve it from the prefix cache.
    if (block.hash != 0) {
      cache_.erase(block.hash);
      events_.evicted.push_back(block.hash);
      block.hash = 0;
    }
  }
}

void BlockManager::Unquarantine(absl::Span<const int32_t> ids) {
  for (int32_t b : ids) {
    Block& block = blocks_[b];
    if (!block.quarantined) continue;
    block.quarantined = false;
    --quarantined_;
  }
  Release(ids);
}

int BlockManager::DropCache() {
  int dropped = 0;
  while (!lru_.empty()) {
    const int32_t b = lru_.front();
    Evict(b);
    free_.push_back(b);
    ++free_count_;
    ++dropped;
  }
  return dropped;
}

PrefixCacheEvents BlockManager::TakeEvents() {
  PrefixCacheEvents out;
  std::swap(out, events_);
  return out;
}

std::vector<uint64_t> BlockManager::CachedHashes() const {
  std::vector<uint64_t> out;
  out.reserve(cache_.size());
  for (const auto& [hash, block] : cache_) out.push_back(hash);
  return out;
}

}  // namespace pdserve::kvcache
