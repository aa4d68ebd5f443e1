#include "kvtransfer/ucx/worker_thread.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "kvtransfer/ucx/ucx_status.h"

namespace pdserve::kvtransfer {

absl::StatusOr<std::unique_ptr<UcxWorkerThread>> UcxWorkerThread::Start(
    ucp_context_h context, const std::function<absl::Status(ucp_worker_h)>& on_created,
    absl::Duration spin) {
  std::unique_ptr<UcxWorkerThread> t(new UcxWorkerThread());
  t->context_ = context;
  t->spin_ = spin;
  absl::Notification created;
  absl::Status status;
  t->thread_ = std::thread([&, raw = t.get()] {
    ucp_worker_params_t params{};
    params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    params.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = FromUcs(ucp_worker_create(raw->context_, &params, &raw->worker_), "worker create");
    if (status.ok())
      status = FromUcs(ucp_worker_get_efd(raw->worker_, &raw->worker_fd_), "worker efd");
    if (status.ok()) {
      raw->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      raw->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = raw->worker_fd_;
      epoll_ctl(raw->epoll_fd_, EPOLL_CTL_ADD, raw->worker_fd_, &ev);
      ev.data.fd = raw->wake_fd_;
      epoll_ctl(raw->epoll_fd_, EPOLL_CTL_ADD, raw->wake_fd_, &ev);
      status = on_created(raw->worker_);
    }
    const bool ok = status.ok();
    created.Notify();
    if (ok) raw->Loop();
  });
  created.WaitForNotification();
  if (!status.ok()) {
    t->stop_ = true;
    t->thread_.join();
    if (t->worker_ != nullptr) ucp_worker_destroy(t->worker_);
    t->worker_ = nullptr;
    return status;
  }
  return t;
}

UcxWorkerThread::~UcxWorkerThread() {
  if (thread_.joinable()) {
    stop_.store(true);
    Wake();
    thread_.join();
  }
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void UcxWorkerThread::SetStopHook(std::function<void()> hook) {
  absl::MutexLock lock(&mu_);
  stop_hook_ = std::move(hook);
}

void UcxWorkerThread::Wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void UcxWorkerThread::Post(std::function<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(fn));
  }
  Wake();
}

void UcxWorkerThread::PostOrRun(std::function<void()> fn) {
  if (OnThread()) {
    fn();
  } else {
    Post(std::move(fn));
  }
}

bool UcxWorkerThread::RunPosted() {
  std::deque<std::function<void()>> batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(queue_);
  }
  for (auto& fn : batch) fn();
  return !batch.empty();
}

bool UcxWorkerThread::ProgressUntil(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    if (ucp_worker_progress(worker_) == 0) absl::SleepFor(absl::Microseconds(50));
  }
  return true;
}

void UcxWorkerThread::Loop() {
  epoll_event events[2];
  absl::Time last_activity = absl::InfinitePast();
  while (!stop_.load()) {
    bool active = RunPosted();
    while (ucp_worker_progress(worker_) != 0) active = true;
    const absl::Time now = absl::Now();
    if (active) last_activity = now;
    if (now - last_activity < spin_) continue;  // Busy for a little longer before sleeping.
    const ucs_status_t armed = ucp_worker_arm(worker_);
    if (armed == UCS_ERR_BUSY) continue;  // Events pending: progress again.
    if (armed != UCS_OK) {
      PDS_LOG_EVERY_N_SEC(WARNING, 10) << "ucp_worker_arm: " << ucs_status_string(armed);
    }
    {
      absl::MutexLock lock(&mu_);
      if (!queue_.empty()) continue;
    }
    const int n = epoll_wait(epoll_fd_, events, 2, /*timeout_ms=*/100);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == wake_fd_) {
        uint64_t value;
        [[maybe_unused]] ssize_t r = read(wake_fd_, &value, sizeof(value));
      }
    }
  }
  // Shutdown: posted work, the owner's cleanup, then the worker itself.
  RunPosted();
  std::function<void()> hook;
  {
    absl::MutexLock lock(&mu_);
    hook = std::move(stop_hook_);
  }
  if (hook) hook();
  RunPosted();
  ucp_worker_destroy(worker_);
  worker_ = nullptr;
}

}  // namespace pdserve::kvtransfer
