// The KV block allocator shared by decode and prefill workers: reference counts, the prefix
// cache's LRU eviction and events, quarantine; and the chained block hashes it is keyed by.
#include "kvcache/block_manager.h"

#include "common/hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvcache/block_hash.h"

namespace pdserve::kvcache {
namespace {

using ::testing::ElementsAre;

TEST(BlockManagerTest, EvictsLeastRecentlyUsedCachedBlocksAndReportsEvents) {
  BlockManager m(3);
  std::vector<int32_t> t;
  ASSERT_TRUE(m.Allocate(3, &t));
  EXPECT_FALSE(m.Allocate(1, &t));
  m.Publish(t[0], 11);
  m.Publish(t[1], 22);
  m.Release(t);  // 11 and 22 cached (in that LRU order), the third block free.
  EXPECT_EQ(m.counts().cached, 2);
  EXPECT_EQ(m.counts().free, 1);
  auto events = m.TakeEvents();
  EXPECT_THAT(events.stored, ElementsAre(11, 22));
  std::vector<int32_t> u;
  ASSERT_TRUE(m.Allocate(2, &u));  // The free block, then evicts 11.
  events = m.TakeEvents();
  EXPECT_THAT(events.evicted, ElementsAre(11));
  EXPECT_EQ(m.MatchPrefix(std::vector<uint64_t>{22}), 1);
  EXPECT_EQ(m.MatchPrefix(std::vector<uint64_t>{11, 22}), 0);
  // Quarantine: the block is held until released, and never served from the cache.
  m.Quarantine(absl::MakeConstSpan(u).subspan(0, 1));
  EXPECT_EQ(m.counts().quarantined, 1);
  m.Unquarantine(absl::MakeConstSpan(u).subspan(0, 1));
  EXPECT_EQ(m.counts().quarantined, 0);
}

// Before the pool holds something else (a role change), the cache is dropped: every cached
// block no sequence holds becomes free and is reported evicted; held ones stay.
TEST(BlockManagerTest, DropCacheFreesEveryUnheldCachedBlock) {
  BlockManager m(4);
  std::vector<int32_t> t;
  ASSERT_TRUE(m.Allocate(3, &t));
  m.Publish(t[0], 11);
  m.Publish(t[1], 22);
  m.Publish(t[2], 33);
  m.Release(absl::MakeConstSpan(t).subspan(0, 2));  // 11 and 22 cached; 33 still held.
  m.TakeEvents();
  EXPECT_EQ(m.DropCache(), 2);
  const BlockCounts c = m.counts();
  EXPECT_EQ(c.cached, 0);
  EXPECT_EQ(c.free, 3);
  EXPECT_EQ(c.in_use, 1);
  EXPECT_THAT(m.TakeEvents().evicted, ElementsAre(11, 22));
  EXPECT_EQ(m.MatchPrefix(std::vector<uint64_t>{11}), 0);
  EXPECT_EQ(m.MatchPrefix(std::vector<uint64_t>{33}), 1);
  std::vector<int32_t> all;
  EXPECT_TRUE(m.Allocate(3, &all));  // The dropped blocks are free for anyone.
}

TEST(BlockHashTest, ChainsOverPrefixes) {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<int32_t> b = {1, 2, 3, 4, 5, 6, 7, 0};
  const auto ha = FullBlockHashes(7, a, 4);
  const auto hb = FullBlockHashes(7, b, 4);
  ASSERT_EQ(ha.size(), 2u);
  ASSERT_EQ(hb.size(), 2u);
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);
  EXPECT_NE(FullBlockHashes(8, a, 4)[0], ha[0]);  // Another model: other hashes.
}

// A block's hash is XXH64, seeded with the model's fingerprint, of its parent's hash then its
// tokens, whatever the block's size (small blocks are hashed from a stack buffer in one pass,
// large ones streamed): the router and workers of other builds must agree on it.
TEST(BlockHashTest, IsTheStreamedHashOfTheParentThenTheTokens) {
  for (int size : {0, 1, 5, 16, 64, 254, 255, 1000}) {
    std::vector<int32_t> tokens(size);
    for (int i = 0; i < size; ++i) tokens[i] = i * 7919 - 3;
    const uint64_t parent = 0x0123456789abcdefULL + size;
    Xxh64State streamed(42);
    streamed.Update(&parent, sizeof(parent));
    streamed.Update(tokens.data(), tokens.size() * sizeof(int32_t));
    const uint64_t expected = streamed.Digest();
    EXPECT_EQ(BlockHash(42, parent, tokens), expected == 0 ? 1 : expected) << size;
  }
}

}  // namespace
}  // namespace pdserve::kvcache
