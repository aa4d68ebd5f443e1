// ArrivalMix: decaying arrival rates, in all and by prompt-length class.
#include "router/arrival_mix.h"

#include <cmath>

#include "gtest/gtest.h"

namespace pdserve::router {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

TEST(ArrivalMixTest, SteadyArrivalsReadAsTheirRate) {
  ArrivalMix mix(absl::Seconds(10));
  EXPECT_EQ(mix.Rate(kStart), 0);
  EXPECT_TRUE(mix.Classes(kStart).empty());
  // 20 per second for a minute (six windows), alternating 100- and 1000-token prompts.
  absl::Time t = kStart;
  for (int i = 0; i < 1200; ++i, t += absl::Milliseconds(50)) mix.Count(t, i % 2 ? 1000 : 100);
  // Read half an interval after the last arrival: the decayed count's mean there is the rate.
  const absl::Time now = t - absl::Milliseconds(25);
  EXPECT_NEAR(mix.Rate(now), 20, 0.2);
  const std::vector<LengthClassRate> classes = mix.Classes(now);
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_NEAR(classes[0].mean_tokens, 100, 1e-9);
  EXPECT_NEAR(classes[1].mean_tokens, 1000, 1e-9);
  EXPECT_NEAR(classes[0].per_s, 10, 0.2);
  EXPECT_NEAR(classes[1].per_s, 10, 0.2);
  EXPECT_NEAR(classes[0].per_s + classes[1].per_s, mix.Rate(now), 1e-9);
  EXPECT_LE(classes[0].min_tokens, 100);
  EXPECT_LE(classes[1].min_tokens, 1000);
  EXPECT_GT(classes[1].min_tokens, 100);
}

TEST(ArrivalMixTest, RatesDecayWithTheWindow) {
  ArrivalMix mix(absl::Seconds(10));
  mix.Count(kStart, 512);
  EXPECT_NEAR(mix.Rate(kStart), 0.1, 1e-12);
  EXPECT_NEAR(mix.Rate(kStart + absl::Seconds(10)), 0.1 / std::exp(1), 1e-12);
  ASSERT_EQ(mix.Classes(kStart + absl::Seconds(10)).size(), 1u);
  EXPECT_NEAR(mix.Classes(kStart + absl::Seconds(10))[0].per_s, 0.1 / std::exp(1), 1e-12);
  // A new arrival decays the old ones first: the classes keep their shares.
  mix.Count(kStart + absl::Seconds(10), 4096);
  const std::vector<LengthClassRate> classes = mix.Classes(kStart + absl::Seconds(10));
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_NEAR(classes[0].per_s, 0.1 / std::exp(1), 1e-12);
  EXPECT_NEAR(classes[1].per_s, 0.1, 1e-12);
  EXPECT_NEAR(classes[1].mean_tokens, 4096, 1e-9);
  // Long gone arrivals are dropped.
  mix.Count(kStart + absl::Hours(1), 8);
  ASSERT_EQ(mix.Classes(kStart + absl::Hours(1)).size(), 1u);
  EXPECT_NEAR(mix.Rate(kStart + absl::Hours(1)), 0.1, 1e-12);
}

// The mix visits only the classes it has counted; one on each side of the 64-class word
// boundary and the last class must all be found, decayed, listed in order and summed, and a
// read of both at once must equal the two reads.
TEST(ArrivalMixTest, EveryCountedClassIsReadAcrossTheWholeRange) {
  ArrivalMix mix(absl::Seconds(10));
  const int lengths[] = {3, 60000, 70000, 1 << 23};  // Classes 6, 63, 64 and the last.
  absl::Time t = kStart;
  for (int tokens : lengths) {
    mix.Count(t, tokens);
    t += absl::Seconds(1);
  }
  const absl::Time now = t;
  const std::vector<LengthClassRate> classes = mix.Classes(now);
  ASSERT_EQ(classes.size(), 4u);
  double sum = 0;
  for (size_t i = 0; i < classes.size(); ++i) {
    const int age_s = static_cast<int>(classes.size() - i);  // Counted 4, 3, 2, 1 s ago.
    EXPECT_NEAR(classes[i].per_s, 0.1 * std::exp(-age_s / 10.0), 1e-12) << i;
    EXPECT_EQ(ArrivalMix::ClassOf(static_cast<int>(classes[i].mean_tokens + 0.5)),
              ArrivalMix::ClassOf(lengths[i]))
        << i;
    sum += classes[i].per_s;
  }
  EXPECT_EQ(ArrivalMix::ClassOf(1 << 23), ArrivalMix::kClasses - 1);
  EXPECT_NEAR(mix.Rate(now), sum, 1e-15);
  const ArrivalMix::Snapshot both = mix.Read(now);
  EXPECT_EQ(both.per_s, mix.Rate(now));
  ASSERT_EQ(both.classes.size(), classes.size());
  for (size_t i = 0; i < classes.size(); ++i) {
    EXPECT_EQ(both.classes[i].per_s, classes[i].per_s);
    EXPECT_EQ(both.classes[i].mean_tokens, classes[i].mean_tokens);
    EXPECT_EQ(both.classes[i].min_tokens, classes[i].min_tokens);
  }
}

TEST(ArrivalMixTest, ClassesAreQuarterOctaves) {
  EXPECT_EQ(ArrivalMix::ClassOf(0), 0);
  EXPECT_EQ(ArrivalMix::ClassOf(1), 0);
  EXPECT_EQ(ArrivalMix::ClassOf(1024), 40);
  EXPECT_EQ(ArrivalMix::ClassOf(1023), 39);
  EXPECT_EQ(ArrivalMix::ClassOf(1218), 41);  // 1024 * 2^(1/4) = 1217.7.
  EXPECT_NEAR(ArrivalMix::ClassMinTokens(40), 1024, 1e-9);
  EXPECT_EQ(ArrivalMix::ClassOf(1 << 30), ArrivalMix::kClasses - 1);
}

}  // namespace
}  // namespace pdserve::router
