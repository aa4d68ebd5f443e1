#include "common/shutdown_signal.h"

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <ctime>

#include "absl/time/clock.h"

namespace pdserve {
namespace {

sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

ShutdownSignal::ShutdownSignal() {
  const sigset_t set = ShutdownSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // Peers closing sockets mid-write must not kill the process.
  signal(SIGPIPE, SIG_IGN);
}

int ShutdownSignal::Wait() { return WaitUntil(absl::InfiniteFuture()); }

int ShutdownSignal::WaitUntil(absl::Time deadline) {
  const sigset_t set = ShutdownSet();
  // Blocked here whatever thread waits, so that Trigger()'s SIGTERM is taken by sigtimedwait.
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  {
    absl::MutexLock lock(&mu_);
    waiter_ = pthread_self();
    waiting_ = true;
  }
  // Sleeps until a signal: Trigger() sends this thread one. (It polled every 50 ms before:
  // 20 wake-ups a second in every idle process, a fleet of 256 workers' worth of CPU.)
  int result = -1;
  while ((result = received_.load()) < 0) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    const timespec slice = absl::ToTimespec(std::min(left, absl::Hours(1)));
    const int sig = sigtimedwait(&set, nullptr, &slice);
    if (sig > 0) {
      int expected = -1;
      received_.compare_exchange_strong(expected, sig);
    }
  }
  absl::MutexLock lock(&mu_);
  waiting_ = false;
  return result;
}

void ShutdownSignal::Trigger() {
  int expected = -1;
  received_.compare_exchange_strong(expected, 0);
  // The waiter, if any, wakes and sees received_ set (a waiter that has just seen it leaves a
  // SIGTERM pending on its thread, where it stays blocked and harmless).
  absl::MutexLock lock(&mu_);
  if (waiting_) pthread_kill(waiter_, SIGTERM);
}

}  // namespace pdserve
