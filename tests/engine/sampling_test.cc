#include "engine/sampling.h"

#include <map>

#include "gtest/gtest.h"

namespace pdserve::engine {
namespace {

using text::SamplingConfig;

TEST(SamplingTest, GreedyPicksTheLowestIdAmongTies) {
  SamplingConfig c;
  c.temperature = 0;
  SamplerScratch s;
  EXPECT_EQ(SampleToken(std::vector<float>{1, 5, 5, 2}, c, 0, &s), 1);
  c.temperature = 1;
  c.top_k = 1;
  EXPECT_EQ(SampleToken(std::vector<float>{1, 5, 5, 2}, c, 0, &s), 1);
}

TEST(SamplingTest, SeededDrawsDependOnlyOnSeedAndPosition) {
  SamplingConfig c;
  c.temperature = 1;
  c.seed = 42;
  SamplerScratch s;
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = static_cast<float>(i % 7);
  std::vector<int32_t> a, b;
  for (int p = 0; p < 40; ++p) a.push_back(SampleToken(logits, c, p, &s));
  for (int p = 0; p < 40; ++p) b.push_back(SampleToken(logits, c, p, &s));
  EXPECT_EQ(a, b);
  c.seed = 43;
  std::vector<int32_t> other;
  for (int p = 0; p < 40; ++p) other.push_back(SampleToken(logits, c, p, &s));
  EXPECT_NE(a, other);
  EXPECT_NE(UniformForPosition(1, 10), UniformForPosition(1, 11));
}

TEST(SamplingTest, TopKAndTopPRestrictTheSupport) {
  std::vector<float> logits = {3.0f, 2.9f, 2.8f, -5.f, -5.f, -6.f};
  SamplerScratch s;
  SamplingConfig c;
  c.temperature = 1;
  c.top_k = 2;
  std::map<int, int> seen;
  for (int p = 0; p < 500; ++p) ++seen[SampleToken(logits, c, p, &s)];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen.count(0) && seen.count(1));
  c.top_k = 0;
  c.top_p = 0.5f;  // The first two tokens hold ~70% of the mass; the first alone ~36%.
  seen.clear();
  for (int p = 0; p < 500; ++p) ++seen[SampleToken(logits, c, p, &s)];
  EXPECT_EQ(seen.size(), 2u);
  // Temperature spreads or sharpens: very low temperature is effectively greedy.
  c.top_p = 1.0f;
  c.temperature = 0.01f;
  for (int p = 0; p < 100; ++p) EXPECT_EQ(SampleToken(logits, c, p, &s), 0);
}

}  // namespace
}  // namespace pdserve::engine
