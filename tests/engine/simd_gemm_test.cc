#include "engine/cpu/simd_gemm.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pdserve::engine {
namespace {

class SimdGemmTest : public ::testing::TestWithParam<CpuIsa> {};

// The Highway microkernel computes each element as the scalar chain does, fma over k in
// order, from zero or from what C held: bit for bit, for every weight type and row count, on
// a whole panel and on a partial one (whose columns past the matrix stay untouched).
TEST_P(SimdGemmTest, EveryElementIsTheScalarFmaChain) {
  const SimdGemm* simd = SimdGemmFor(GetParam());
  if (simd == nullptr) GTEST_SKIP() << "no Highway GEMM for " << CpuIsaName(GetParam());
  constexpr int kN = 45, kK = 37, kLd = 40;  // Two panels, the second of 13 columns.
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> w(kN * kK), a(SimdGemm::kMaxRows * kK), before(SimdGemm::kMaxRows * kLd);
  for (float& x : w) x = normal(rng);
  for (float& x : a) x = normal(rng);
  for (float& x : before) x = normal(rng);
  for (WeightType type : {WeightType::kF32, WeightType::kBF16, WeightType::kF16}) {
    const PackedMatrix packed = PackedMatrix::Pack(w.data(), kN, kK, kK, type);
    for (int panel = 0; panel < packed.panels(); ++panel) {
      const auto* b = static_cast<const uint8_t*>(packed.data()) + static_cast<size_t>(panel) * kK *
                                                                       PackedMatrix::kPanelWidth *
                                                                       WeightTypeBytes(type);
      const int ncols = std::min(PackedMatrix::kPanelWidth, kN - panel * PackedMatrix::kPanelWidth);
      for (int rows = 1; rows <= SimdGemm::kMaxRows; ++rows) {
        for (bool first : {true, false}) {
          std::vector<float> c = before;
          simd->kernels[static_cast<int>(type)][rows - 1](a.data(), kK, b, kK, c.data(), kLd, ncols,
                                                          first);
          for (int r = 0; r < SimdGemm::kMaxRows; ++r) {
            for (int j = 0; j < kLd; ++j) {
              float want = before[r * kLd + j];
              if (r < rows && j < ncols) {
                if (first) want = 0;
                for (int k = 0; k < kK; ++k)
                  want = std::fma(a[r * kK + k],
                                  packed.At(panel * PackedMatrix::kPanelWidth + j, k), want);
              }
              ASSERT_EQ(c[r * kLd + j], want)
                  << WeightTypeName(type) << " panel " << panel << " rows " << rows << " first "
                  << first << " at " << r << "," << j;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, SimdGemmTest, ::testing::ValuesIn(SupportedCpuIsas()),
                         [](const ::testing::TestParamInfo<CpuIsa>& info) {
                           return std::string(CpuIsaName(info.param));
                         });

}  // namespace
}  // namespace pdserve::engine
