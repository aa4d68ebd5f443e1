// Time source interface so that code whose behaviour depends on time (timeouts, report
// intervals, latency accounting) can be tested with a fake clock.
// Thread-safety: implementations are safe to call from any thread.
#ifndef PDSERVE_COMMON_CLOCK_H_
#define PDSERVE_COMMON_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pdserve {

class Clock {
 public:
  virtual ~Clock() = default;
  // The current time.
  virtual absl::Time Now() const = 0;
  // Blocks until Now() >= deadline.
  virtual void SleepUntil(absl::Time deadline) = 0;

  // The process-wide real clock (stateless, never destroyed).
  static Clock* Real();
};

// absl::Now() and absl::SleepFor().
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  void SleepUntil(absl::Time deadline) override;
};

// A clock that only moves when told to. SleepUntil blocks until another thread advances the
// clock past the deadline.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24 * 365 * 50))
      : now_(start) {}
  absl::Time Now() const override;
  void SleepUntil(absl::Time deadline) override;
  void Advance(absl::Duration d);
  void Set(absl::Time t);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve

#endif  // PDSERVE_COMMON_CLOCK_H_
