// A clock for tests of code that waits on deadlines: time moves when the test says so
// (Advance) or when the code sleeps, which returns at once with the clock at the deadline. So
// a modelled wait is measured exactly, without waiting for it.
// Thread-safety: safe from any thread.
#ifndef PDSERVE_TESTS_TESTING_JUMPING_CLOCK_H_
#define PDSERVE_TESTS_TESTING_JUMPING_CLOCK_H_

#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/clock.h"

namespace pdserve::testing {

class JumpingClock final : public Clock {
 public:
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void SleepUntil(absl::Time deadline) override {
    absl::MutexLock lock(&mu_);
    if (deadline > now_) now_ = deadline;
    sleeps_.push_back(deadline);
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  // Every deadline slept until, in order.
  std::vector<absl::Time> sleeps() const {
    absl::MutexLock lock(&mu_);
    return sleeps_;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::UnixEpoch();
  std::vector<absl::Time> sleeps_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_TESTING_JUMPING_CLOCK_H_
