#include "engine/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/half.h"
#include "gtest/gtest.h"

namespace pdserve::engine {
namespace {

// A pool of one layer whose keys and values are `dtype`, and the same pool in f32 holding the
// values the half-precision one widens to.
struct Pools {
  KvLayout half_layout;
  KvLayout float_layout;
  std::vector<uint8_t> half_pool;
  std::vector<uint8_t> float_pool;
};

Pools RandomPools(DType dtype, int num_kv_heads, int head_dim, int num_blocks, uint32_t seed) {
  Pools p;
  p.half_layout = {.num_layers = 1,
                   .num_kv_heads = num_kv_heads,
                   .head_dim = head_dim,
                   .block_size = 16,
                   .dtype = dtype,
                   .num_blocks = num_blocks};
  p.float_layout = p.half_layout;
  p.float_layout.dtype = DType::kF32;
  p.half_pool.resize(p.half_layout.pool_bytes());
  p.float_pool.resize(p.float_layout.pool_bytes());
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  auto* half = reinterpret_cast<uint16_t*>(p.half_pool.data());
  auto* widened = reinterpret_cast<float*>(p.float_pool.data());
  for (size_t i = 0; i < p.half_pool.size() / 2; ++i) {
    const float x = 3 * normal(rng);
    half[i] = dtype == DType::kF16 ? FloatToHalf(x) : FloatToBf16(x);
    widened[i] = dtype == DType::kF16 ? HalfToFloat(half[i]) : Bf16ToFloat(half[i]);
  }
  return p;
}

class AttentionTest : public ::testing::TestWithParam<CpuIsa> {};

// Widening a half-precision cache is exact, so every path must give, bit for bit, what it gives
// on an f32 cache holding the widened values: a widening that lost or reordered lanes (the
// vector paths widen 4, 8 or 16 elements at a time, with a partial vector at the row's end)
// fails it. head_dim 70 leaves a partial vector on every path.
TEST_P(AttentionTest, HalfPrecisionCachesGiveTheResultOfTheirWidenedValues) {
  const CpuIsa isa = GetParam();
  constexpr int kHeads = 2, kHeadDim = 70, kBlocks = 6;
  const std::vector<int32_t> block_table = {4, 1, 5, 0, 2};  // 80 positions, out of order.
  const std::vector<int> positions = {0, 15, 16, 47, 79};
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> queries(positions.size() * kHeadDim);
  for (float& q : queries) q = normal(rng);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Pools p = RandomPools(dtype, kHeads, kHeadDim, kBlocks, 11);
    for (int kv_head = 0; kv_head < kHeads; ++kv_head) {
      std::vector<float> from_half(queries.size()), from_float(queries.size());
      auto run = [&](const KvLayout& layout, const std::vector<uint8_t>& pool,
                     std::vector<float>* out) {
        std::vector<AttentionRow> rows;
        for (size_t r = 0; r < positions.size(); ++r) {
          rows.push_back({.q = queries.data() + r * kHeadDim,
                          .out = out->data() + r * kHeadDim,
                          .position = positions[r]});
        }
        AttentionScratch scratch;
        AttendRows(isa, layout, pool.data(), /*layer=*/0, kv_head, rows.data(),
                   static_cast<int>(rows.size()), block_table.data(), 0.125f, &scratch);
      };
      run(p.half_layout, p.half_pool, &from_half);
      run(p.float_layout, p.float_pool, &from_float);
      for (size_t i = 0; i < queries.size(); ++i) {
        ASSERT_EQ(from_half[i], from_float[i])
            << DTypeName(dtype) << " kv_head " << kv_head << " row " << i / kHeadDim << " dim "
            << i % kHeadDim;
      }
    }
  }
}

// Attention of one row computed in double from an f32 pool: softmax(q . K^T * scale) V over
// keys 0..position.
std::vector<double> ReferenceAttention(const KvLayout& layout, const std::vector<uint8_t>& pool,
                                       int kv_head, const std::vector<int32_t>& block_table,
                                       const float* q, int position, float scale) {
  const int hd = layout.head_dim;
  auto row = [&](int kv, int j) {
    const size_t offset = layout.RegionOffset(0, kv, block_table[j / layout.block_size]) +
                          static_cast<size_t>(j % layout.block_size) * layout.token_bytes() +
                          static_cast<size_t>(kv_head) * hd * sizeof(float);
    return reinterpret_cast<const float*>(pool.data() + offset);
  };
  std::vector<double> scores(position + 1);
  double max = -1e300;
  for (int j = 0; j <= position; ++j) {
    double dot = 0;
    for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[d]) * row(0, j)[d];
    scores[j] = dot * scale;
    max = std::max(max, scores[j]);
  }
  double sum = 0;
  for (double& s : scores) sum += (s = std::exp(s - max));
  std::vector<double> out(hd, 0.0);
  for (int j = 0; j <= position; ++j) {
    for (int d = 0; d < hd; ++d) out[d] += scores[j] / sum * row(1, j)[d];
  }
  return out;
}

// Every vector path takes the rows in register tiles (up to 12 rows on AVX-512, 6 on the
// Highway targets) with a causal tail where the tile's rows end at different positions, and
// the dimensions past the last full tile separately: each count of rows from 1 to 13, with
// positions as a prefill tile's (three query heads per position, rising), on head_dim 64 and
// 70, must give what the definition gives. A tile that read another row's probabilities or
// skipped a row's last keys fails it.
TEST_P(AttentionTest, EveryCountOfRowsGivesTheDefinitionsResult) {
  const CpuIsa isa = GetParam();
  const std::vector<int32_t> block_table = {4, 1, 5, 0, 2};  // 80 positions, out of order.
  constexpr float kScale = 0.125f;
  for (int head_dim : {64, 70}) {
    const Pools p = RandomPools(DType::kF16, /*num_kv_heads=*/2, head_dim, /*num_blocks=*/6, 3);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    for (int n = 1; n <= 13; ++n) {
      std::vector<float> queries(static_cast<size_t>(n) * head_dim), out(queries.size());
      for (float& q : queries) q = normal(rng);
      std::vector<AttentionRow> rows;
      for (int r = 0; r < n; ++r) {
        rows.push_back({.q = queries.data() + static_cast<size_t>(r) * head_dim,
                        .out = out.data() + static_cast<size_t>(r) * head_dim,
                        .position = std::min(79, 30 + (r / 3) * 7 + r % 2)});
      }
      AttentionScratch scratch;
      AttendRows(isa, p.float_layout, p.float_pool.data(), /*layer=*/0, /*kv_head=*/1, rows.data(),
                 n, block_table.data(), kScale, &scratch);
      for (int r = 0; r < n; ++r) {
        const std::vector<double> want = ReferenceAttention(
            p.float_layout, p.float_pool, 1, block_table, rows[r].q, rows[r].position, kScale);
        for (int d = 0; d < head_dim; ++d) {
          ASSERT_NEAR(rows[r].out[d], want[d], 1e-4)
              << "head_dim " << head_dim << ", " << n << " rows: row " << r << " dim " << d;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, AttentionTest, ::testing::ValuesIn(SupportedCpuIsas()),
                         [](const ::testing::TestParamInfo<CpuIsa>& info) {
                           return std::string(CpuIsaName(info.param));
                         });

}  // namespace
}  // namespace pdserve::engine
