// Deterministic KV contents for transfer tests: every (layer, K|V, i-th block of the
// transfer) region gets bytes derived from a seed, so a receiver can check each destination
// block whatever its id.
#ifndef PDSERVE_TESTS_KVTRANSFER_KV_TEST_DATA_H_
#define PDSERVE_TESTS_KVTRANSFER_KV_TEST_DATA_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/hash.h"
#include "common/kv_layout.h"

namespace pdserve::kvtransfer::testing {

inline void FillRegion(uint8_t* dst, size_t bytes, uint64_t seed, int layer, int kv, int index) {
  uint64_t state =
      Xxh64(&seed, sizeof(seed), static_cast<uint64_t>(layer) * 1000003 + kv * 7919 + index);
  for (size_t i = 0; i < bytes; i += 8) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const uint64_t v = state ^ (state >> 29);
    std::memcpy(dst + i, &v, std::min<size_t>(8, bytes - i));
  }
}

// Fills the source pool's `blocks` for layers [0, layers).
inline void FillSource(uint8_t* base, const KvLayout& layout, const std::vector<int32_t>& blocks,
                       int layers, uint64_t seed) {
  for (int l = 0; l < layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      for (size_t i = 0; i < blocks.size(); ++i) {
        FillRegion(base + layout.RegionOffset(l, kv, blocks[i]), layout.region_bytes(), seed, l, kv,
                   static_cast<int>(i));
      }
    }
  }
}

// Counts destination regions whose bytes differ from what FillSource wrote for them.
inline int CountMismatches(const uint8_t* base, const KvLayout& layout,
                           const std::vector<int32_t>& blocks, int layers, uint64_t seed) {
  std::vector<uint8_t> expected(layout.region_bytes());
  int bad = 0;
  for (int l = 0; l < layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      for (size_t i = 0; i < blocks.size(); ++i) {
        FillRegion(expected.data(), expected.size(), seed, l, kv, static_cast<int>(i));
        if (std::memcmp(base + layout.RegionOffset(l, kv, blocks[i]), expected.data(),
                        expected.size()) != 0) {
          ++bad;
        }
      }
    }
  }
  return bad;
}

inline KvLayout TestLayout(int num_blocks, DType dtype = DType::kF32) {
  KvLayout l;
  l.num_layers = 4;
  l.num_kv_heads = 2;
  l.head_dim = 16;
  l.block_size = 8;
  l.dtype = dtype;
  l.num_blocks = num_blocks;
  return l;
}

}  // namespace pdserve::kvtransfer::testing

#endif  // PDSERVE_TESTS_KVTRANSFER_KV_TEST_DATA_H_
