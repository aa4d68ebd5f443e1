// A fixed pool of worker threads for the CPU backend's data-parallel kernels. Run() hands the
// same function to every worker (the caller is worker 0) and returns when all have finished;
// workers split the work by their index, so a given output element is always computed by
// the same code with the same arithmetic whatever the thread count.
// Workers spin briefly after a job (decode steps come back-to-back), then sleep.
// Thread-safety: Run() must not be called concurrently from two threads.
#ifndef PDSERVE_ENGINE_CPU_THREAD_POOL_H_
#define PDSERVE_ENGINE_CPU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pdserve::engine {

class ThreadPool {
 public:
  // `num_threads` >= 1 counts the calling thread.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(worker, size()) once on every worker, worker 0 being the caller.
  void Run(const std::function<void(int worker, int num_workers)>& fn);

  // Splits [0, n) into contiguous ranges, one per worker: fn(begin, end).
  void ParallelFor(int n, const std::function<void(int begin, int end)>& fn);
  // Hands out indices 0..n-1 one at a time to whichever worker is free: fn(worker, index).
  // For work items of uneven cost (attention over contexts of different lengths).
  void ParallelForDynamic(int n, const std::function<void(int worker, int index)>& fn);

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
};

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_CPU_THREAD_POOL_H_
