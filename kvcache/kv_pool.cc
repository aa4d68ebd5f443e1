#include "kvcache/kv_pool.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/zero_pages.h"

namespace pdserve::kvcache {

absl::StatusOr<std::unique_ptr<KvPool>> KvPool::Allocate(const KvLayout& layout, bool commit) {
  RETURN_IF_ERROR(layout.Validate());
  const size_t bytes = (layout.pool_bytes() + 63) / 64 * 64;
  void* base = std::aligned_alloc(64, bytes);
  if (base == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("kv pool: cannot allocate ", bytes, " bytes"));
  }
  if (commit) {
    std::memset(base, 0, bytes);
  } else {
    ZeroResidentPages(base, bytes);
  }
  std::unique_ptr<KvPool> pool(new KvPool());
  pool->layout_ = layout;
  pool->base_ = static_cast<uint8_t*>(base);
  pool->owned_ = true;
  return pool;
}

absl::StatusOr<std::unique_ptr<KvPool>> KvPool::Wrap(const KvLayout& layout, void* base,
                                                     size_t size, std::shared_ptr<void> owner) {
  RETURN_IF_ERROR(layout.Validate());
  if (base == nullptr || size < layout.pool_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("kv pool: supplied memory of ", size,
                                                   " bytes is smaller than the layout's ",
                                                   layout.pool_bytes()));
  }
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) {
    return absl::InvalidArgumentError("kv pool: supplied memory is not 16-byte aligned");
  }
  std::unique_ptr<KvPool> pool(new KvPool());
  pool->layout_ = layout;
  pool->base_ = static_cast<uint8_t*>(base);
  pool->owner_ = std::move(owner);
  return pool;
}

int KvPool::BlocksForBytes(const KvLayout& layout, size_t bytes) {
  const size_t per_block = layout.region_bytes() * 2 * static_cast<size_t>(layout.num_layers);
  if (per_block == 0) return 0;
  const size_t blocks = bytes / per_block;
  return blocks > static_cast<size_t>(1 << 30) ? (1 << 30) : static_cast<int>(blocks);
}

KvPool::~KvPool() {
  if (owned_) std::free(base_);
}

}  // namespace pdserve::kvcache
