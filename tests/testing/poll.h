// Waiting on a condition instead of sleeping: polls `done` until it holds or `timeout`
// passes. The one helper behind every "wait until X" in the tests (router status, metrics,
// receiver counters, engine-loop state).
// Thread-safety: reentrant.
#ifndef PDSERVE_TESTS_TESTING_POLL_H_
#define PDSERVE_TESTS_TESTING_POLL_H_

#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pdserve::testing {

inline bool PollUntil(const std::function<bool()>& done, absl::Duration timeout,
                      absl::Duration interval = absl::Milliseconds(5)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(interval);
  }
  return true;
}

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_TESTING_POLL_H_
