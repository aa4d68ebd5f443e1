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
  // Poll in short slices so that Trigger() from another thread is seen promptly without
  // signalling tricks.
  while (received_.load() < 0) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return -1;
    const timespec slice = absl::ToTimespec(std::min(left, absl::Milliseconds(50)));
    const int sig = sigtimedwait(&set, nullptr, &slice);
    if (sig > 0) {
      int expected = -1;
      received_.compare_exchange_strong(expected, sig);
    }
  }
  return received_.load();
}

void ShutdownSignal::Trigger() {
  int expected = -1;
  received_.compare_exchange_strong(expected, 0);
}

}  // namespace pdserve
