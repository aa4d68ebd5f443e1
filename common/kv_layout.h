// Geometry of a paged KV pool, shared by the engine (which reads and writes it) and the KV
// transfer layer (which registers it and writes into it remotely).
//
// Memory layout, one contiguous allocation:
//   [layer][K|V][block][block_size][kv_heads][head_dim]   elements of `dtype`
// so one (layer, K|V, block) is one contiguous region of region_bytes(): the unit a UCX put
// writes. Regions of consecutive blocks of the same (layer, K|V) are adjacent, which lets a
// transfer coalesce runs of consecutive block ids into one operation.
// Thread-safety: a plain value type.
#ifndef PDSERVE_COMMON_KV_LAYOUT_H_
#define PDSERVE_COMMON_KV_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pdserve {

enum class DType : uint8_t { kF32 = 1, kF16 = 2, kBF16 = 3 };

size_t DTypeSize(DType dtype);
absl::string_view DTypeName(DType dtype);
// Parses "f32"/"float32"/"F32", "f16"/"float16"/"half"/"F16", "bf16"/"bfloat16"/"BF16".
bool ParseDType(absl::string_view text, DType* out);

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  DType dtype = DType::kF32;
  int num_blocks = 0;

  // Bytes of one token's K (or V) in one layer.
  size_t token_bytes() const {
    return static_cast<size_t>(num_kv_heads) * head_dim * DTypeSize(dtype);
  }
  // Bytes of one (layer, K|V, block) region.
  size_t region_bytes() const { return token_bytes() * block_size; }
  // Bytes of the whole pool.
  size_t pool_bytes() const { return region_bytes() * num_blocks * 2 * num_layers; }
  // Byte offset of region (layer, kv, block) from the pool base; kv is 0 for K, 1 for V.
  size_t RegionOffset(int layer, int kv, int block) const {
    return ((static_cast<size_t>(layer) * 2 + kv) * num_blocks + block) * region_bytes();
  }
  // Positive sizes, block_size a power of two <= 1024, and a pool under 1 TiB.
  absl::Status Validate() const;
  // Same geometry apart from num_blocks (what a sender must match to write into a pool).
  bool SameGeometry(const KvLayout& other) const;
  // Names the first field that differs from `other` (ignoring num_blocks), for errors.
  std::string GeometryMismatch(const KvLayout& other) const;
  std::string DebugString() const;
};

}  // namespace pdserve

#endif  // PDSERVE_COMMON_KV_LAYOUT_H_
