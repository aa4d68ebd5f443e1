// A fixed set of threads running submitted tasks in order, with a bound on queued tasks:
// TrySubmit refuses when the queue is full instead of growing without limit. For work that
// must not run on gRPC's callback threads (the router's tokenization of text prompts: a long
// prompt there once starved every other reaction, the registry's among them).
// Thread-safety: TrySubmit from any thread. The destructor runs what is queued, then joins.
#ifndef PDSERVE_COMMON_BOUNDED_EXECUTOR_H_
#define PDSERVE_COMMON_BOUNDED_EXECUTOR_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace pdserve {

class BoundedExecutor {
 public:
  // `threads` >= 1 workers; at most `max_queued` tasks wait (running ones do not count).
  BoundedExecutor(std::string name, int threads, int max_queued);
  ~BoundedExecutor();
  BoundedExecutor(const BoundedExecutor&) = delete;
  BoundedExecutor& operator=(const BoundedExecutor&) = delete;

  // Queues `task`; false (and `task` is dropped unrun) when max_queued tasks already wait.
  bool TrySubmit(std::function<void()> task);
  int queued() const;

 private:
  void Work();

  const std::string name_;
  const int max_queued_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace pdserve

#endif  // PDSERVE_COMMON_BOUNDED_EXECUTOR_H_
