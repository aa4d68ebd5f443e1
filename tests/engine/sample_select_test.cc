#include "engine/sample_select.h"

#include <algorithm>
#include <random>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/sampling.h"
#include "gtest/gtest.h"

namespace pdserve::engine {
namespace {

using text::SamplingConfig;

// The probabilities SampleToken computes, and their float sum.
std::pair<std::vector<float>, float> Probs(const std::vector<float>& logits, float temperature) {
  std::vector<float> p(logits.size());
  const float max = *std::max_element(logits.begin(), logits.end());
  const float inv_t = 1.0f / temperature;
  for (size_t i = 0; i < p.size(); ++i) p[i] = (logits[i] - max) * inv_t;
  const float sum = kernels::ExpInPlaceSum(BestCpuIsa(), p.data(), static_cast<int>(p.size()));
  return {p, sum};
}

int32_t Select(const std::vector<float>& logits, const SamplingConfig& c, uint64_t position) {
  const auto [p, sum] = Probs(logits, c.temperature);
  select::HostRow row(p.data(), static_cast<int32_t>(p.size()));
  select::RowSamplingParams params{c.temperature, c.top_p, c.top_k, c.seed, position};
  return select::SelectToken(row, params, sum);
}

TEST(SampleSelectTest, TheStreamIsSamplingsStream) {
  for (uint64_t seed : {0ull, 7ull, 1ull << 40}) {
    for (uint64_t pos : {0ull, 1ull, 123456ull})
      EXPECT_EQ(select::UniformForPosition(seed, pos), UniformForPosition(seed, pos));
  }
}

TEST(SampleSelectTest, FirstCrossingFindsTheKthInSortedOrderWithTiesById) {
  //                       id: 0    1    2    3    4    5
  const std::vector<float> p = {0.1f, 0.4f, 0.2f, 0.4f, 0.2f, 0.05f};
  select::HostRow row(p.data(), static_cast<int32_t>(p.size()));
  // Sorted: 1 (0.4), 3 (0.4), 2 (0.2), 4 (0.2), 0 (0.1), 5 (0.05).
  const int32_t expected[] = {1, 3, 2, 4, 0, 5};
  for (int k = 1; k <= 6; ++k) {
    const select::Crossing c =
        select::FirstCrossing(row, select::Kept{}, select::Weight::kCount, k, true);
    ASSERT_TRUE(c.found) << k;
    EXPECT_EQ(c.id, expected[k - 1]) << k;
    EXPECT_EQ(c.value, p[expected[k - 1]]) << k;
  }
  // Keeping the first three, the mass is 1.0; the draw at 0.85 lands on id 2.
  const select::Kept top3{0.2f, 2};
  EXPECT_NEAR(row.SumAbove(-1.0f, top3, select::Weight::kMass), 1.0, 1e-6);
  EXPECT_EQ(select::FirstCrossing(row, top3, select::Weight::kMass, 0.85, false).id, 2);
  EXPECT_FALSE(select::FirstCrossing(row, top3, select::Weight::kCount, 4, true).found);
}

// The selection over thresholds picks SampleToken's token: exactly for the full distribution
// (the same walk), and for top-k / top-p up to the order in which candidate masses are summed
// (a draw within rounding of a boundary).
TEST(SampleSelectTest, MatchesSampleTokenOnRandomRowsAndConfigs) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  SamplerScratch scratch;
  int draws = 0, same = 0, full_draws = 0, full_same = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const int n = 50 + static_cast<int>(rng() % 3000);
    std::vector<float> logits(n);
    // Every third row quantised: many exact ties.
    const bool ties = trial % 3 == 0;
    for (float& l : logits) l = ties ? std::round(normal(rng)) : normal(rng);
    SamplingConfig c;
    c.temperature = std::vector<float>{0.3f, 0.7f, 1.0f, 1.5f}[trial % 4];
    c.top_k = std::vector<int>{0, 0, 1 + static_cast<int>(rng() % 50), 5}[(trial / 4) % 4];
    c.top_p = std::vector<float>{1.0f, 0.9f, 0.5f}[(trial / 16) % 3];
    c.seed = rng();
    if (c.greedy()) continue;
    for (uint64_t pos = 0; pos < 5; ++pos) {
      const int32_t want = SampleToken(logits, c, pos, &scratch);
      const int32_t got = Select(logits, c, pos);
      ASSERT_GE(got, 0);
      ASSERT_LT(got, n);
      ++draws;
      same += got == want;
      if (c.top_k == 0 && c.top_p >= 1.0f) {
        ++full_draws;
        full_same += got == want;
      }
    }
  }
  EXPECT_GT(full_draws, 100);
  EXPECT_EQ(full_same, full_draws);
  EXPECT_GT(draws, 2000);
  EXPECT_GE(same, draws - draws / 500) << same << " of " << draws;
}

}  // namespace
}  // namespace pdserve::engine
