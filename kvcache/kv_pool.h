// The paged KV pool: one contiguous allocation laid out as KvLayout documents,
//   [layer][K|V][block][block_size][kv_heads][head_dim],
// either owned (64-byte aligned, zeroed) or supplied by the caller (the KV transfer layer
// allocates and registers the memory with UCX, then hands it here).
// Which blocks belong to whom is the block manager's business, not the pool's.
// Thread-safety: the pool is plain memory; callers coordinate access to blocks.
#ifndef PDSERVE_KVCACHE_KV_POOL_H_
#define PDSERVE_KVCACHE_KV_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/kv_layout.h"

namespace pdserve::kvcache {

class KvPool {
 public:
  // Allocates and zeroes layout.pool_bytes(). `commit`: writes every page (the memory is
  // committed now); otherwise only pages handed back dirty are zeroed and the rest stays
  // unbacked until first used (common/zero_pages.h).
  static absl::StatusOr<std::unique_ptr<KvPool>> Allocate(const KvLayout& layout,
                                                          bool commit = true);
  // Uses caller-owned memory of `size` bytes (>= layout.pool_bytes()), which must outlive
  // the pool (or be kept alive by `owner`, released with the pool: device memory, say) and
  // be at least 16-byte aligned. The memory may be a GPU's: only the backend that made it
  // reads it.
  static absl::StatusOr<std::unique_ptr<KvPool>> Wrap(const KvLayout& layout, void* base,
                                                      size_t size,
                                                      std::shared_ptr<void> owner = nullptr);
  // How many blocks fit in `bytes` with `layout`'s geometry (num_blocks ignored).
  static int BlocksForBytes(const KvLayout& layout, size_t bytes);
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  const KvLayout& layout() const { return layout_; }
  uint8_t* base() { return base_; }
  const uint8_t* base() const { return base_; }
  uint8_t* Region(int layer, int kv, int block) {
    return base_ + layout_.RegionOffset(layer, kv, block);
  }
  const uint8_t* Region(int layer, int kv, int block) const {
    return base_ + layout_.RegionOffset(layer, kv, block);
  }

 private:
  KvPool() = default;
  KvLayout layout_;
  uint8_t* base_ = nullptr;
  bool owned_ = false;
  std::shared_ptr<void> owner_;
};

}  // namespace pdserve::kvcache

#endif  // PDSERVE_KVCACHE_KV_POOL_H_
