// The prefix index: longest cached prefix per worker by intersecting holder sets along the
// chained hashes, resets, evictions and worker removal.
#include "router/prefix_index.h"

#include <algorithm>
#include <map>

#include "gtest/gtest.h"

namespace pdserve::router {
namespace {

std::map<PrefixIndex::Slot, int> Match(const PrefixIndex& index, std::vector<uint64_t> hashes) {
  std::vector<std::pair<PrefixIndex::Slot, int>> out;
  index.Match(hashes, &out);
  std::map<PrefixIndex::Slot, int> m(out.begin(), out.end());
  EXPECT_EQ(m.size(), out.size()) << "a worker appears twice";
  return m;
}

TEST(PrefixIndexTest, LongestLeadingRunPerWorker) {
  PrefixIndex index;
  index.Apply(0, false, std::vector<uint64_t>{1, 2, 3, 4}, {});
  index.Apply(1, false, std::vector<uint64_t>{1, 2}, {});
  index.Apply(2, false, std::vector<uint64_t>{2, 3, 4}, {});  // Holds later blocks, not the first.
  index.Apply(3, false, std::vector<uint64_t>{1, 3, 4}, {});  // A gap after the first block.
  const auto m = Match(index, {1, 2, 3, 4, 5});
  EXPECT_EQ(m, (std::map<PrefixIndex::Slot, int>{{0, 4}, {1, 2}, {3, 1}}));
  EXPECT_TRUE(Match(index, {9, 1, 2}).empty());
  EXPECT_TRUE(Match(index, {}).empty());
}

TEST(PrefixIndexTest, EvictionsResetsAndRemoval) {
  PrefixIndex index;
  index.Apply(0, false, std::vector<uint64_t>{1, 2, 3}, {});
  index.Apply(1, false, std::vector<uint64_t>{1, 2, 3}, {});
  index.Apply(0, false, {}, std::vector<uint64_t>{2});
  EXPECT_EQ(Match(index, {1, 2, 3}), (std::map<PrefixIndex::Slot, int>{{0, 1}, {1, 3}}));
  // A reset replaces everything the worker reported.
  index.Apply(1, true, std::vector<uint64_t>{7, 8}, {});
  EXPECT_EQ(Match(index, {1, 2, 3}), (std::map<PrefixIndex::Slot, int>{{0, 1}}));
  EXPECT_EQ(Match(index, {7, 8}), (std::map<PrefixIndex::Slot, int>{{1, 2}}));
  EXPECT_EQ(index.blocks_of(1), 2u);
  index.RemoveWorker(1);
  EXPECT_TRUE(Match(index, {7, 8}).empty());
  EXPECT_EQ(index.blocks_of(1), 0u);
  // Duplicates and evictions of unknown hashes are harmless.
  index.Apply(0, false, std::vector<uint64_t>{1, 1}, std::vector<uint64_t>{42});
  EXPECT_EQ(index.blocks_of(0), 2u);
  index.RemoveWorker(0);
  EXPECT_EQ(index.distinct_blocks(), 0u);
}

TEST(PrefixIndexTest, ManyWorkersSharingAPrefix) {
  PrefixIndex index;
  for (PrefixIndex::Slot w = 0; w < 64; ++w) {
    std::vector<uint64_t> hashes;
    for (uint64_t b = 0; b < w % 8 + 1; ++b) hashes.push_back(100 + b);
    index.Apply(w, false, hashes, {});
  }
  std::vector<uint64_t> prompt;
  for (uint64_t b = 0; b < 10; ++b) prompt.push_back(100 + b);
  const auto m = Match(index, prompt);
  ASSERT_EQ(m.size(), 64u);
  for (auto [w, blocks] : m) EXPECT_EQ(blocks, static_cast<int>(w % 8 + 1)) << w;
}

}  // namespace
}  // namespace pdserve::router
