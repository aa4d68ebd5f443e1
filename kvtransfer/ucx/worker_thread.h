// The one thread that owns a UCP worker (UCS_THREAD_MODE_SINGLE). Other threads Post() work
// to it; it runs posted work, progresses the worker, and sleeps on the worker's event fd
// (ucp_worker_arm + epoll) plus an eventfd for posted work when there is nothing to do, so an
// idle transport uses no CPU. Every UCX callback runs on this thread.
// Thread-safety: Post/RunSync from any thread; worker() only on this thread.
#ifndef PDSERVE_KVTRANSFER_UCX_WORKER_THREAD_H_
#define PDSERVE_KVTRANSFER_UCX_WORKER_THREAD_H_

#include <ucp/api/ucp.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pdserve::kvtransfer {

class UcxWorkerThread {
 public:
  // Creates the worker on a new thread. `on_created` runs on that thread right after the
  // worker exists (register active-message handlers there).
  // After any activity the thread keeps polling for `spin` before it arms the event fd and
  // sleeps: a transfer's next step (the flush after the puts, the completion after the
  // flush) usually follows within microseconds, and an epoll wake-up costs tens of them.
  static absl::StatusOr<std::unique_ptr<UcxWorkerThread>> Start(
      ucp_context_h context, const std::function<absl::Status(ucp_worker_h)>& on_created,
      absl::Duration spin = absl::ZeroDuration());
  // Runs `on_stop` (if set) on the thread, destroys the worker there, and joins.
  ~UcxWorkerThread();
  UcxWorkerThread(const UcxWorkerThread&) = delete;
  UcxWorkerThread& operator=(const UcxWorkerThread&) = delete;

  void Post(std::function<void()> fn);
  // Runs `fn` on the thread and waits for its status. DEADLINE_EXCEEDED after `timeout`
  // (the function still runs later; it must not touch the caller's stack).
  absl::Status RunSync(std::function<absl::Status()> fn, absl::Duration timeout);
  // Set before destruction: cleanup that must run on this thread while the worker exists.
  void SetStopHook(std::function<void()> hook);

  ucp_worker_h worker() const { return worker_; }
  bool OnThread() const { return std::this_thread::get_id() == thread_.get_id(); }
  // Progresses the worker until `done()` or `timeout` (only on this thread).
  bool ProgressUntil(const std::function<bool()>& done, absl::Duration timeout);

 private:
  UcxWorkerThread() = default;
  void Loop();
  void Wake();
  bool RunPosted();

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int worker_fd_ = -1;
  int wake_fd_ = -1;
  int epoll_fd_ = -1;
  absl::Duration spin_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::function<void()> stop_hook_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_UCX_WORKER_THREAD_H_
