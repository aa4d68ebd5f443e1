#include "engine/cpu/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pdserve::engine {
namespace {

// About 20-50 us of spinning before a worker sleeps: long enough to catch the next kernel of
// the same forward pass, short enough not to steal a core from other processes when idle.
constexpr int kSpinIterations = 20000;

// A spin-wait hint: it lets the core's other hardware thread run and saves power.
inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  const int workers = num_threads > 1 ? num_threads - 1 : 0;
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this, i] { WorkerLoop(i + 1); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  const int n = size();
  if (n == 1) {
    fn(0, 1);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    pending_.store(n - 1);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  fn(0, n);
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinIterations) {
      CpuRelax();
    } else {
      std::unique_lock<std::mutex> lock(mu_);
      done_.wait(lock, [this] { return pending_.load() == 0; });
    }
  }
}

void ThreadPool::ParallelFor(int n, const std::function<void(int, int)>& fn) {
  if (n <= 0) return;
  Run([&](int worker, int workers) {
    const int begin = static_cast<int>(static_cast<int64_t>(n) * worker / workers);
    const int end = static_cast<int>(static_cast<int64_t>(n) * (worker + 1) / workers);
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::ParallelForDynamic(int n, const std::function<void(int, int)>& fn) {
  if (n <= 0) return;
  if (n == 1 || size() == 1) {
    for (int i = 0; i < n; ++i) fn(0, i);
    return;
  }
  std::atomic<int> next{0};
  Run([&](int worker, int) {
    for (int i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      fn(worker, i);
    }
  });
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    uint64_t current = generation_.load(std::memory_order_acquire);
    for (int spin = 0; current == seen && spin < kSpinIterations; ++spin) {
      CpuRelax();
      current = generation_.load(std::memory_order_acquire);
    }
    if (current == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      current = generation_.load();
    }
    seen = current;
    if (stop_.load()) return;
    const std::function<void(int, int)>* job;
    {
      std::lock_guard<std::mutex> lock(mu_);
      job = job_;
    }
    (*job)(index, size());
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

}  // namespace pdserve::engine
