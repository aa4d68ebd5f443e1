#include "engine/cpu/attention.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/cpu/kernels.h"
#include "engine/half.h"

namespace pdserve::engine {
namespace {

// Returns a float view of one cached K or V row (converting 16-bit caches into `buffer`).
inline const float* RowAsFloat(const uint8_t* row, DType dtype, int head_dim, float* buffer) {
  switch (dtype) {
    case DType::kF32:
      return reinterpret_cast<const float*>(row);
    case DType::kF16:
      HalfToFloat(reinterpret_cast<const uint16_t*>(row), buffer, head_dim);
      return buffer;
    case DType::kBF16:
      Bf16ToFloat(reinterpret_cast<const uint16_t*>(row), buffer, head_dim);
      return buffer;
  }
  return buffer;
}

}  // namespace

void AttendGroup(const KvLayout& layout, const uint8_t* pool_base, int layer, int kv_head,
                 const float* q, int group, int context_len, const int32_t* block_table,
                 float scale, AttentionScratch* scratch, float* out) {
  const int head_dim = layout.head_dim;
  const int block_size = layout.block_size;
  const size_t token_bytes = layout.token_bytes();
  const size_t head_offset = static_cast<size_t>(kv_head) * head_dim * DTypeSize(layout.dtype);
  scratch->scores.resize(static_cast<size_t>(group) * context_len);
  scratch->kv_row.resize(head_dim);
  float* scores = scratch->scores.data();

  // Scores, key by key (each key row is loaded once for the whole group).
  for (int j = 0; j < context_len; ++j) {
    const int block = block_table[j / block_size];
    const uint8_t* k_row = pool_base + layout.RegionOffset(layer, 0, block) +
                           static_cast<size_t>(j % block_size) * token_bytes + head_offset;
    const float* k = RowAsFloat(k_row, layout.dtype, head_dim, scratch->kv_row.data());
    for (int g = 0; g < group; ++g) {
      scores[static_cast<size_t>(g) * context_len + j] = kernels::Dot(q + g * head_dim, k, head_dim) * scale;
    }
  }
  // Softmax numerators and denominators per head.
  std::vector<float> inv_sum(group);
  for (int g = 0; g < group; ++g) {
    float* s = scores + static_cast<size_t>(g) * context_len;
    float max = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < context_len; ++j) max = std::max(max, s[j]);
    for (int j = 0; j < context_len; ++j) s[j] -= max;
    inv_sum[g] = 1.0f / kernels::ExpInPlaceSum(s, context_len);
  }
  // Weighted sum of values.
  std::memset(out, 0, sizeof(float) * group * head_dim);
  for (int j = 0; j < context_len; ++j) {
    const int block = block_table[j / block_size];
    const uint8_t* v_row = pool_base + layout.RegionOffset(layer, 1, block) +
                           static_cast<size_t>(j % block_size) * token_bytes + head_offset;
    const float* v = RowAsFloat(v_row, layout.dtype, head_dim, scratch->kv_row.data());
    for (int g = 0; g < group; ++g) {
      kernels::Axpy(scores[static_cast<size_t>(g) * context_len + j], v, head_dim, out + g * head_dim);
    }
  }
  for (int g = 0; g < group; ++g) kernels::Scale(out + g * head_dim, inv_sum[g], head_dim);
}

}  // namespace pdserve::engine
