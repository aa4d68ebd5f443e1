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
#include <optional>
#include <thread>
#include <tuple>
#include <type_traits>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
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
  // Runs fn(args...) on the thread and waits for its result; DEADLINE_EXCEEDED after
  // `timeout`. A function that times out still runs later, so it cannot be allowed to reach
  // the caller's stack: `fn` is a plain function (a lambda without captures, written
  // `+[](...) {...}`), every argument is copied into state the call owns, and the result
  // comes back through that state. Pass pointers only to objects that outlive this thread.
  template <typename Result, typename... Params, typename... Args>
  Result RunSync(absl::Duration timeout, Result (*fn)(Params...), Args&&... args);
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

  void PostOrRun(std::function<void()> fn);

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

template <typename Result, typename... Params, typename... Args>
Result UcxWorkerThread::RunSync(absl::Duration timeout, Result (*fn)(Params...), Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "RunSync: one argument per parameter");
  struct Shared {
    absl::Notification done;
    std::optional<Result> result;
  };
  auto shared = std::make_shared<Shared>();
  // Arguments are copied: a reference to the caller's frame cannot get in.
  auto call = [shared, fn,
               copies =
                   std::make_tuple(std::decay_t<Args>(std::forward<Args>(args))...)]() mutable {
    shared->result.emplace(std::apply(fn, std::move(copies)));
    shared->done.Notify();
  };
  PostOrRun(std::move(call));
  if (!shared->done.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError("ucx: worker thread did not answer in time");
  }
  return *std::move(shared->result);
}

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_UCX_WORKER_THREAD_H_
