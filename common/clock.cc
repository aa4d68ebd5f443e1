#include "common/clock.h"

namespace pdserve {

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

void RealClock::SleepUntil(absl::Time deadline) {
  const absl::Duration d = deadline - absl::Now();
  if (d > absl::ZeroDuration()) absl::SleepFor(d);
}

absl::Time FakeClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::SleepUntil(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto reached = [this, deadline]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return now_ >= deadline; };
  mu_.Await(absl::Condition(&reached));
}

void FakeClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

void FakeClock::Set(absl::Time t) {
  absl::MutexLock lock(&mu_);
  now_ = t;
}

}  // namespace pdserve
