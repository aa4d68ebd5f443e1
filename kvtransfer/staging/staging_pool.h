// The blocks of a pinned host staging pool, leased to transfers: a bounded pool (its size is a
// flag of the worker, accounted beside the device KV pool), so a burst of offloads waits or
// fails with a clear error instead of pinning unbounded host memory.
// Thread-safety: every method may be called from any thread; a lease returns its blocks when
// destroyed, on any thread.
#ifndef PDSERVE_KVTRANSFER_STAGING_STAGING_POOL_H_
#define PDSERVE_KVTRANSFER_STAGING_STAGING_POOL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace pdserve::kvtransfer {

class StagingPool;

// Blocks of the staging pool held by one transfer; returned when the lease is destroyed.
class StagingLease {
 public:
  StagingLease() = default;
  ~StagingLease();
  StagingLease(StagingLease&& other) noexcept;
  StagingLease& operator=(StagingLease&& other) noexcept;
  StagingLease(const StagingLease&) = delete;
  StagingLease& operator=(const StagingLease&) = delete;

  const std::vector<int32_t>& blocks() const { return blocks_; }

 private:
  friend class StagingPool;
  StagingLease(std::shared_ptr<StagingPool> pool, std::vector<int32_t> blocks)
      : pool_(std::move(pool)), blocks_(std::move(blocks)) {}
  void Return();

  std::shared_ptr<StagingPool> pool_;
  std::vector<int32_t> blocks_;
};

class StagingPool : public std::enable_shared_from_this<StagingPool> {
 public:
  // `flag` names the setting that sizes the pool, for errors.
  static std::shared_ptr<StagingPool> Create(int num_blocks, std::string flag);

  // `count` blocks, or RESOURCE_EXHAUSTED naming the pool's size and what is free.
  absl::StatusOr<StagingLease> Acquire(int count);
  int free_blocks() const;
  int num_blocks() const { return num_blocks_; }
  // The setting that sizes the pool (e.g. "--kv_staging_blocks"), for errors.
  const std::string& flag() const { return flag_; }
  // Called with the blocks in use whenever that changes (and once now), under the pool's lock:
  // it must not block or call back (a metrics gauge).
  void SetObserver(std::function<void(int in_use)> observer);

 private:
  friend class StagingLease;
  StagingPool(int num_blocks, std::string flag);
  void Return(const std::vector<int32_t>& blocks);

  const int num_blocks_;
  const std::string flag_;
  mutable absl::Mutex mu_;
  std::vector<int32_t> free_ ABSL_GUARDED_BY(mu_);
  std::function<void(int)> observer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_STAGING_STAGING_POOL_H_
