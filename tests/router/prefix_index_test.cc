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

// Hashes made as needed: asked for in order, each once, and not past the block after the
// last one some worker holds; the same matches as with every hash made first.
TEST(PrefixIndexTest, HashesAreMadeOnlyAsFarAsTheyMatch) {
  PrefixIndex index;
  index.Apply(0, false, std::vector<uint64_t>{1, 2, 3, 4}, {});
  index.Apply(1, false, std::vector<uint64_t>{1, 2}, {});
  const std::vector<uint64_t> prompt = {1, 2, 3, 9, 10, 11, 12};
  std::vector<size_t> asked;
  std::vector<std::pair<PrefixIndex::Slot, int>> out;
  index.Match(
      prompt.size(),
      [&](size_t i) {
        asked.push_back(i);
        return prompt[i];
      },
      &out);
  EXPECT_EQ(asked, (std::vector<size_t>{0, 1, 2, 3}));  // Block 3 (9) ends every match.
  const std::map<PrefixIndex::Slot, int> lazily(out.begin(), out.end());
  EXPECT_EQ(lazily, Match(index, prompt));
  asked.clear();
  out.clear();
  index.Match(
      3,
      [&](size_t i) {
        asked.push_back(i);
        return uint64_t{100 + i};
      },
      &out);
  EXPECT_EQ(asked, std::vector<size_t>{0});  // Nobody holds the first block: one hash.
  EXPECT_TRUE(out.empty());
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
