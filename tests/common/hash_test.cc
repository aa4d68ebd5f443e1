#include "common/hash.h"

#include <string>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

// Reference values from xxhsum -H64 (the xxHash project's own tool).
TEST(Xxh64Test, MatchesReferenceVectors) {
  EXPECT_EQ(Xxh64(""), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(Xxh64("a"), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(Xxh64("abc"), 0x44BC2CF5AD770999ULL);
  EXPECT_EQ(Xxh64("Nobody inspects the spammish repetition"), 0xFBCEA83C8A378BF1ULL);
  EXPECT_EQ(Xxh64(std::string(1000, 'x')), 0x4CB9A3B69CB700E1ULL);
}

TEST(Xxh64Test, StreamingEqualsOneShotForEverySplit) {
  std::string data;
  for (int i = 0; i < 200; ++i) data.push_back(static_cast<char>(i * 7));
  const uint64_t whole = Xxh64(data, 99);
  for (size_t split = 0; split <= data.size(); split += 13) {
    Xxh64State s(99);
    s.Update(data.substr(0, split));
    s.Update(data.substr(split, 5));
    s.Update(data.substr(std::min(data.size(), split + 5)));
    EXPECT_EQ(s.Digest(), whole) << split;
  }
  EXPECT_NE(Xxh64(data, 1), Xxh64(data, 2));
}

}  // namespace
}  // namespace pdserve
