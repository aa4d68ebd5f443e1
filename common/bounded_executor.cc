#include "common/bounded_executor.h"

#include <pthread.h>

namespace pdserve {

BoundedExecutor::BoundedExecutor(std::string name, int threads, int max_queued)
    : name_(std::move(name)), max_queued_(max_queued) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this] { Work(); });
    pthread_setname_np(threads_.back().native_handle(), name_.substr(0, 15).c_str());
  }
}

BoundedExecutor::~BoundedExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

bool BoundedExecutor::TrySubmit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stop_ || static_cast<int>(queue_.size()) >= max_queued_) return false;
  queue_.push_back(std::move(task));
  return true;
}

int BoundedExecutor::queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

void BoundedExecutor::Work() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // Stopping, and nothing left to run.
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace pdserve
