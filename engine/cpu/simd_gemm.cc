// Highway compiles this file once per target (foreach_target.h re-includes it); the table at
// the end maps CpuIsa to each target's microkernels.
#include "engine/cpu/simd_gemm.h"

#include <cstddef>

// The targets a CpuIsa selects here: AVX2 (for x86's tests) and NEON; not SVE (sizeless
// vectors cannot form the accumulator arrays), not AVX-512 (its intrinsics kernel runs).
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS \
  (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3 | HWY_AVX3_DL | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/cpu/simd_gemm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace pdserve::engine::HWY_NAMESPACE {
// Not for Highway's one-lane baseline (HWY_SCALAR), which the table below never selects.
#if HWY_TARGET != HWY_SCALAR
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

constexpr int kPanel = PackedMatrix::kPanelWidth;

// MR rows x 32 columns: 32 / Lanes accumulators a row (8 on NEON, 4 on AVX2).
template <int MR, WeightType W>
void Kernel(const float* a, int lda, const uint8_t* b, int kc, float* c, int ldc, int ncols,
            bool first) {
  const D d;
  constexpr size_t kLanes = hn::MaxLanes(D());
  constexpr int kVectors = kPanel / static_cast<int>(kLanes);
  static_assert(kVectors >= 2 && kVectors % 2 == 0, "a panel row is an even count of vectors");
  HWY_ALIGN float tile[MR][kPanel];
  V acc[MR][kVectors];
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < kPanel; ++j) tile[r][j] = (first || j >= ncols) ? 0.f : c[r * ldc + j];
    for (int v = 0; v < kVectors; ++v) acc[r][v] = hn::Load(d, &tile[r][v * kLanes]);
  }
  const hn::Repartition<uint16_t, D> du16;  // Twice the lanes, of 16 bits.
  const hn::RebindToUnsigned<D> du32;
  const hn::Rebind<hwy::float16_t, D> df16;
  const auto zero16 = hn::Zero(du16);
  for (int k = 0; k < kc; ++k) {
    V bv[kVectors];
    if constexpr (W == WeightType::kF32) {
      const float* row = reinterpret_cast<const float*>(b) + static_cast<size_t>(k) * kPanel;
      for (int v = 0; v < kVectors; ++v) bv[v] = hn::LoadU(d, row + v * kLanes);
    } else if constexpr (W == WeightType::kBF16) {
      // gemm.h's bfloat16 layout: within each 128-bit block L of a k-row, words 0..3 hold
      // columns 4L..4L+3 and words 4..7 columns 16+4L..16+4L+3; a bfloat16 is a float's top
      // half, so zipping zeros below the low (high) words widens them to the columns in order.
      const uint16_t* row = reinterpret_cast<const uint16_t*>(b) + static_cast<size_t>(k) * kPanel;
      for (int i = 0; i < kVectors / 2; ++i) {
        const auto raw = hn::LoadU(du16, row + i * 2 * kLanes);
        bv[i] = hn::BitCast(d, hn::ZipLower(du32, zero16, raw));
        bv[kVectors / 2 + i] = hn::BitCast(d, hn::ZipUpper(du32, zero16, raw));
      }
    } else {
      const auto* row =
          reinterpret_cast<const hwy::float16_t*>(b) + static_cast<size_t>(k) * kPanel;
      for (int v = 0; v < kVectors; ++v)
        bv[v] = hn::PromoteTo(d, hn::LoadU(df16, row + v * kLanes));
    }
    for (int r = 0; r < MR; ++r) {
      const V av = hn::Set(d, a[r * lda + k]);
      for (int v = 0; v < kVectors; ++v) acc[r][v] = hn::MulAdd(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < kVectors; ++v) hn::Store(acc[r][v], d, &tile[r][v * kLanes]);
    for (int j = 0; j < ncols; ++j) c[r * ldc + j] = tile[r][j];
  }
}

}  // namespace

static_assert(SimdGemm::kMaxRows == 3, "the table below lists 3 row counts");
const SimdGemm kSimdGemm = {
    {{&Kernel<1, WeightType::kF32>, &Kernel<2, WeightType::kF32>, &Kernel<3, WeightType::kF32>},
     {&Kernel<1, WeightType::kBF16>, &Kernel<2, WeightType::kBF16>, &Kernel<3, WeightType::kBF16>},
     {&Kernel<1, WeightType::kF16>, &Kernel<2, WeightType::kF16>, &Kernel<3, WeightType::kF16>}},
    hwy::TargetName(HWY_TARGET)};
#endif  // HWY_TARGET != HWY_SCALAR

}  // namespace pdserve::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pdserve::engine {

const SimdGemm* SimdGemmFor(CpuIsa isa) {
  switch (isa) {
#if HWY_TARGETS & HWY_AVX2
    case CpuIsa::kAvx2:
      return &N_AVX2::kSimdGemm;
#endif
#if HWY_TARGETS & HWY_NEON
    case CpuIsa::kNeon:
      return &N_NEON::kSimdGemm;
#endif
    default:
      return nullptr;
  }
}

}  // namespace pdserve::engine
#endif  // HWY_ONCE
