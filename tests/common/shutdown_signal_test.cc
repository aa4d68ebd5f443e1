// ShutdownSignal: Trigger() from another thread ends a Wait() that sleeps (it no longer polls),
// a deadline ends WaitUntil() with -1, and a SIGTERM sent to the waiting thread is returned.
#include "common/shutdown_signal.h"

#include <pthread.h>
#include <signal.h>

#include <thread>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(ShutdownSignalTest, TriggerWakesASleepingWaiter) {
  ShutdownSignal shutdown;
  // The waiter would sleep for a minute: only Trigger() can end it with 0 before that.
  std::thread trigger([&] {
    absl::SleepFor(absl::Milliseconds(100));
    shutdown.Trigger();
  });
  const absl::Time start = absl::Now();
  EXPECT_EQ(shutdown.WaitUntil(start + absl::Minutes(1)), 0);
  trigger.join();
  EXPECT_TRUE(shutdown.triggered());
  // Once triggered, every later wait returns at once.
  EXPECT_EQ(shutdown.Wait(), 0);
}

TEST(ShutdownSignalTest, ADeadlineEndsTheWaitUntriggered) {
  ShutdownSignal shutdown;
  EXPECT_EQ(shutdown.WaitUntil(absl::Now() + absl::Milliseconds(50)), -1);
  EXPECT_EQ(shutdown.WaitUntil(absl::Now() - absl::Seconds(1)), -1);
  EXPECT_FALSE(shutdown.triggered());
}

TEST(ShutdownSignalTest, ASignalToTheWaiterIsReturned) {
  ShutdownSignal shutdown;
  const pthread_t waiter = pthread_self();
  std::thread sender([&] {
    absl::SleepFor(absl::Milliseconds(100));
    pthread_kill(waiter, SIGINT);
  });
  EXPECT_EQ(shutdown.WaitUntil(absl::Now() + absl::Minutes(1)), SIGINT);
  sender.join();
}

}  // namespace
}  // namespace pdserve
