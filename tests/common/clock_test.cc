#include "common/clock.h"

#include <thread>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(FakeClockTest, OnlyMovesWhenAdvanced) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  EXPECT_EQ(clock.Now(), start);
  clock.Advance(absl::Seconds(3));
  EXPECT_EQ(clock.Now() - start, absl::Seconds(3));
}

TEST(FakeClockTest, SleepUntilWakesWhenAdvancedPastDeadline) {
  FakeClock clock;
  const absl::Time deadline = clock.Now() + absl::Seconds(10);
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    clock.SleepUntil(deadline);
    woke = true;
  });
  clock.Advance(absl::Seconds(5));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(woke.load());
  clock.Advance(absl::Seconds(5));
  sleeper.join();
  EXPECT_TRUE(woke.load());
}

TEST(RealClockTest, MovesForward) {
  Clock* clock = Clock::Real();
  const absl::Time a = clock->Now();
  clock->SleepUntil(a + absl::Milliseconds(2));
  EXPECT_GE(clock->Now() - a, absl::Milliseconds(2));
}

}  // namespace
}  // namespace pdserve
