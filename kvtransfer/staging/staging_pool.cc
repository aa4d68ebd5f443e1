#include "kvtransfer/staging/staging_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pdserve::kvtransfer {

StagingLease::~StagingLease() { Return(); }

StagingLease::StagingLease(StagingLease&& other) noexcept
    : pool_(std::move(other.pool_)), blocks_(std::move(other.blocks_)) {
  other.blocks_.clear();
}

StagingLease& StagingLease::operator=(StagingLease&& other) noexcept {
  if (this != &other) {
    Return();
    pool_ = std::move(other.pool_);
    blocks_ = std::move(other.blocks_);
    other.blocks_.clear();
  }
  return *this;
}

void StagingLease::Return() {
  if (pool_ != nullptr && !blocks_.empty()) pool_->Return(blocks_);
  blocks_.clear();
  pool_.reset();
}

std::shared_ptr<StagingPool> StagingPool::Create(int num_blocks, std::string flag) {
  return std::shared_ptr<StagingPool>(new StagingPool(num_blocks, std::move(flag)));
}

StagingPool::StagingPool(int num_blocks, std::string flag)
    : num_blocks_(std::max(0, num_blocks)), flag_(std::move(flag)) {
  // Lowest ids first: leases of consecutive blocks coalesce into fewer copies and puts.
  for (int b = num_blocks_ - 1; b >= 0; --b) free_.push_back(b);
}

absl::StatusOr<StagingLease> StagingPool::Acquire(int count) {
  if (count <= 0) return absl::InvalidArgumentError("staging: a lease needs at least one block");
  absl::MutexLock lock(&mu_);
  if (count > static_cast<int>(free_.size())) {
    return absl::ResourceExhaustedError(absl::StrCat("staging pool: ", count, " blocks wanted, ",
                                                     free_.size(), " of ", num_blocks_, " free (",
                                                     flag_, ")"));
  }
  std::vector<int32_t> blocks(free_.end() - count, free_.end());
  std::reverse(blocks.begin(), blocks.end());
  free_.resize(free_.size() - count);
  if (observer_) observer_(num_blocks_ - static_cast<int>(free_.size()));
  return StagingLease(shared_from_this(), std::move(blocks));
}

int StagingPool::free_blocks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(free_.size());
}

void StagingPool::Return(const std::vector<int32_t>& blocks) {
  absl::MutexLock lock(&mu_);
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) free_.push_back(*it);
  // Keep the lowest ids at the back (taken first).
  std::sort(free_.begin(), free_.end(), std::greater<int32_t>());
  if (observer_) observer_(num_blocks_ - static_cast<int>(free_.size()));
}

void StagingPool::SetObserver(std::function<void(int in_use)> observer) {
  absl::MutexLock lock(&mu_);
  observer_ = std::move(observer);
  if (observer_) observer_(num_blocks_ - static_cast<int>(free_.size()));
}

}  // namespace pdserve::kvtransfer
