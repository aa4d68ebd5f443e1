// Turns SIGTERM/SIGINT into an orderly shutdown. Install() blocks the two signals in the
// calling thread, and so in every thread created after it (call it first thing in main);
// the main thread then calls Wait(), which returns when a signal arrives or Trigger() is
// called, and starts the drain.
// Thread-safety: Trigger() and triggered() are safe from any thread; Wait() is for one thread.
#ifndef PDSERVE_COMMON_SHUTDOWN_SIGNAL_H_
#define PDSERVE_COMMON_SHUTDOWN_SIGNAL_H_

#include <pthread.h>

#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pdserve {

class ShutdownSignal {
 public:
  // Blocks SIGTERM and SIGINT (and ignores SIGPIPE) for this thread and its future children.
  ShutdownSignal();
  ShutdownSignal(const ShutdownSignal&) = delete;
  ShutdownSignal& operator=(const ShutdownSignal&) = delete;

  // Blocks until a shutdown signal arrives or Trigger() is called; returns the signal number
  // (0 for Trigger()).
  int Wait();
  // Like Wait() but gives up at `deadline`; returns -1 on timeout.
  int WaitUntil(absl::Time deadline);
  // Asks Wait() to return, as if a signal had arrived (by sending the waiting thread a
  // SIGTERM it consumes itself, so that Wait() sleeps instead of polling).
  void Trigger();
  bool triggered() const { return received_.load() >= 0; }

 private:
  std::atomic<int> received_{-1};
  absl::Mutex mu_;
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;
  pthread_t waiter_ ABSL_GUARDED_BY(mu_){};
};

}  // namespace pdserve

#endif  // PDSERVE_COMMON_SHUTDOWN_SIGNAL_H_
