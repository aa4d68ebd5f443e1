// Highway compiles this file once per target (foreach_target.h re-includes it); the table at
// the end maps CpuIsa to each target's kernels.
#include "engine/cpu/simd_kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "engine/cpu/attention.h"
#include "engine/half.h"

// Only the targets CpuIsa selects (plus Highway's baseline, always built): fewer copies to
// compile. Not SVE: its vectors are sizeless, and the value pass keeps one accumulator per row
// in an array (GCC refuses arrays of SVE vectors); Arm runs NEON.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS \
  (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/cpu/simd_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace pdserve::engine::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// A vector of the `count` (< Lanes) floats at p, the rest zero, without reading past them.
V LoadTail(D d, const float* p, size_t count) {
  HWY_ALIGN float buf[hn::MaxLanes(D())] = {};
  std::memcpy(buf, p, count * sizeof(float));
  return hn::Load(d, buf);
}

void StoreTail(V v, D d, float* p, size_t count) {
  HWY_ALIGN float buf[hn::MaxLanes(D())];
  hn::Store(v, d, buf);
  std::memcpy(p, buf, count * sizeof(float));
}

// exp(x), ~1 ulp (the Cephes polynomial of kernels.cc's AVX-512 Exp512), 0 below -103.
V Exp(D d, V x) {
  const hn::RebindToSigned<D> di;
  const auto tiny = hn::Lt(x, hn::Set(d, -103.0f));
  x = hn::Min(x, hn::Set(d, 88.3762626647949f));
  x = hn::Max(x, hn::Set(d, -103.0f));
  const V n = hn::Round(hn::Mul(x, hn::Set(d, 1.44269504088896341f)));
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  V p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  p = hn::MulAdd(p, hn::Mul(r, r), hn::Add(r, hn::Set(d, 1.0f)));
  // p * 2^n for n in [-149, 128], as two powers of two that are each a normal float, so that
  // a subnormal result is rounded once (as AVX-512's scalef does).
  const auto ni = hn::ConvertTo(di, n);
  const auto n1 = hn::ShiftRight<1>(ni);
  const auto n2 = hn::Sub(ni, n1);
  const auto bias = hn::Set(di, 127);
  const V s1 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n1, bias)));
  const V s2 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n2, bias)));
  return hn::IfThenZeroElse(tiny, hn::Mul(hn::Mul(p, s1), s2));
}

float RmsNormImpl(const float* x, const float* weight, float eps, int dim, float* y) {
  const D d;
  const size_t lanes = hn::Lanes(d), n = static_cast<size_t>(dim);
  V acc = hn::Zero(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const V v = hn::LoadU(d, x + i);
    acc = hn::MulAdd(v, v, acc);
  }
  if (i < n) {
    const V v = LoadTail(d, x + i, n - i);
    acc = hn::MulAdd(v, v, acc);
  }
  const float ss = hn::GetLane(hn::SumOfLanes(d, acc));
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
  const V s = hn::Set(d, scale);
  for (i = 0; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, x + i), s), hn::LoadU(d, weight + i)), d, y + i);
  }
  if (i < n) {
    const V v = hn::Mul(hn::Mul(LoadTail(d, x + i, n - i), s), LoadTail(d, weight + i, n - i));
    StoreTail(v, d, y + i, n - i);
  }
  return scale;
}

void SiluMulImpl(const float* gate, const float* up, int count, float* out) {
  const D d;
  const size_t lanes = hn::Lanes(d), n = static_cast<size_t>(count);
  const V one = hn::Set(d, 1.0f);
  auto silu_mul = [&](V g, V u) {
    return hn::Mul(hn::Div(g, hn::Add(one, Exp(d, hn::Neg(g)))), u);
  };
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(silu_mul(hn::LoadU(d, gate + i), hn::LoadU(d, up + i)), d, out + i);
  }
  if (i < n) {
    StoreTail(silu_mul(LoadTail(d, gate + i, n - i), LoadTail(d, up + i, n - i)), d, out + i,
              n - i);
  }
}

float ExpInPlaceSumImpl(float* x, int count) {
  const D d;
  const size_t lanes = hn::Lanes(d), n = static_cast<size_t>(count);
  V acc = hn::Zero(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const V e = Exp(d, hn::LoadU(d, x + i));
    hn::StoreU(e, d, x + i);
    acc = hn::Add(acc, e);
  }
  if (i < n) {
    // The tail's padding lanes are exp(0) = 1: masked out of the sum.
    const V e = hn::IfThenElseZero(hn::FirstN(d, n - i), Exp(d, LoadTail(d, x + i, n - i)));
    StoreTail(e, d, x + i, n - i);
    acc = hn::Add(acc, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, acc));
}

float ScaleMaxImpl(float* x, float scale, int count) {
  const D d;
  const size_t lanes = hn::Lanes(d), n = static_cast<size_t>(count);
  const V s = hn::Set(d, scale);
  const V lowest = hn::Set(d, -std::numeric_limits<float>::infinity());
  V max = lowest;
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const V v = hn::Mul(hn::LoadU(d, x + i), s);
    hn::StoreU(v, d, x + i);
    max = hn::Max(max, v);
  }
  if (i < n) {
    const V v = hn::Mul(LoadTail(d, x + i, n - i), s);
    StoreTail(v, d, x + i, n - i);
    max = hn::Max(max, hn::IfThenElse(hn::FirstN(d, n - i), v, lowest));  // Not the padding.
  }
  return hn::GetLane(hn::MaxOfLanes(d, max));
}

void AddScalarImpl(float* x, float add, int count) {
  const D d;
  const size_t lanes = hn::Lanes(d), n = static_cast<size_t>(count);
  const V a = hn::Set(d, add);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Add(hn::LoadU(d, x + i), a), d, x + i);
  if (i < n) StoreTail(hn::Add(LoadTail(d, x + i, n - i), a), d, x + i, n - i);
}

// A full vector of a cached row's elements [first, first + Lanes) as floats; `kType` fixed at
// compile time, so the value pass's inner loop has no branch on it. Half precision is widened
// in registers, exactly (F16C on the x86 targets, FCVTL on NEON; bf16 is a float's top half).
template <DType kType>
HWY_INLINE V LoadFullKv(D d, const uint8_t* row, size_t first) {
  if constexpr (kType == DType::kF32) {
    return hn::LoadU(d, reinterpret_cast<const float*>(row) + first);
  } else if constexpr (kType == DType::kBF16) {
    const hn::Rebind<hwy::bfloat16_t, D> dbf16;
    return hn::PromoteTo(d,
                         hn::LoadU(dbf16, reinterpret_cast<const hwy::bfloat16_t*>(row) + first));
  } else {
    const hn::Rebind<hwy::float16_t, D> df16;
    return hn::PromoteTo(d, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(row) + first));
  }
}

// Elements [first, first + Lanes) of a cached row as floats (zero past head_dim).
V LoadKv(D d, const uint8_t* row, DType dtype, size_t first, size_t head_dim) {
  const size_t lanes = hn::Lanes(d);
  const size_t count = first + lanes <= head_dim ? lanes : head_dim - first;
  if (dtype == DType::kF32) {
    const float* p = reinterpret_cast<const float*>(row) + first;
    return count == lanes ? hn::LoadU(d, p) : LoadTail(d, p, count);
  }
  if (count == lanes) {
    return dtype == DType::kBF16 ? LoadFullKv<DType::kBF16>(d, row, first)
                                 : LoadFullKv<DType::kF16>(d, row, first);
  }
  const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + first;
  // The row's last, partial vector: through a buffer.
  HWY_ALIGN float buf[hn::MaxLanes(D())] = {};
  for (size_t k = 0; k < count; ++k)
    buf[k] = dtype == DType::kBF16 ? Bf16ToFloat(p[k]) : HalfToFloat(p[k]);
  return hn::Load(d, buf);
}

// The value pass in register tiles of kTileRows rows x kTileVecs vectors of dimensions (16
// dimensions on AVX2 and NEON): a value row's vectors are loaded once for all the tile's rows,
// and a row's probability once for all its vectors. AVX2 holds the 12 accumulators, 2 value
// vectors and the broadcast in its 16 registers (NEON: 24 of 32). A single vector of a row
// at a time, as before, loaded the value row once per four FMAs and branched on every row's
// causal limit at every j.
constexpr int kTileRows = 6;
constexpr size_t kTileVecs = hn::MaxLanes(D()) >= 16 ? 1 : 16 / hn::MaxLanes(D());

// One tile: rows [0, MR) of `rows`, dimensions [d0, d0 + kTileVecs * Lanes), all inside head_dim.
// Each output element is one FMA chain over j in order: the same arithmetic as the generic pass.
template <DType kType, int MR>
void ValueTile(const AttentionRow* rows, const uint8_t* const* v_rows, size_t d0,
               const float* probs, size_t stride) {
  const D d;
  const size_t lanes = hn::Lanes(d);
  V acc[MR][kTileVecs];
  int first_end = rows[0].position, last_end = rows[0].position;
  for (int r = 0; r < MR; ++r) {
    for (size_t k = 0; k < kTileVecs; ++k) acc[r][k] = hn::Zero(d);
    first_end = std::min(first_end, rows[r].position);
    last_end = std::max(last_end, rows[r].position);
  }
  int j = 0;
  for (; j <= first_end; ++j) {  // Every row attends to j.
    V v[kTileVecs];
    for (size_t k = 0; k < kTileVecs; ++k) v[k] = LoadFullKv<kType>(d, v_rows[j], d0 + k * lanes);
    for (int r = 0; r < MR; ++r) {
      const V p = hn::Set(d, probs[r * stride + j]);
      for (size_t k = 0; k < kTileVecs; ++k) acc[r][k] = hn::MulAdd(p, v[k], acc[r][k]);
    }
  }
  for (; j <= last_end; ++j) {  // The causal tail: only rows whose position reaches j.
    V v[kTileVecs];
    for (size_t k = 0; k < kTileVecs; ++k) v[k] = LoadFullKv<kType>(d, v_rows[j], d0 + k * lanes);
    for (int r = 0; r < MR; ++r) {
      if (j > rows[r].position) continue;
      const V p = hn::Set(d, probs[r * stride + j]);
      for (size_t k = 0; k < kTileVecs; ++k) acc[r][k] = hn::MulAdd(p, v[k], acc[r][k]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (size_t k = 0; k < kTileVecs; ++k) hn::StoreU(acc[r][k], d, rows[r].out + d0 + k * lanes);
  }
}

using ValueTileFn = void (*)(const AttentionRow*, const uint8_t* const*, size_t, const float*,
                             size_t);

template <DType kType, int... Rs>
constexpr std::array<ValueTileFn, sizeof...(Rs)> MakeValueTiles(std::integer_sequence<int, Rs...>) {
  return {&ValueTile<kType, Rs + 1>...};
}

template <DType kType>
constexpr auto kValueTiles = MakeValueTiles<kType>(std::make_integer_sequence<int, kTileRows>{});

// The dimensions past the last full tile (head_dim not a multiple of 16): one vector of up to
// four rows at a time, the dtype chosen per load. Same chains, same order.
constexpr int kRowsPerPass = 4;

void ValueRemainder(const AttentionRow* rows, int n, const uint8_t* const* v_rows, DType dtype,
                    size_t first_dim, size_t hd, const float* probs, size_t stride) {
  const D d;
  const size_t lanes = hn::Lanes(d);
  for (int r0 = 0; r0 < n; r0 += kRowsPerPass) {
    const int mr = std::min(kRowsPerPass, n - r0);
    int last = 0;
    for (int r = 0; r < mr; ++r) last = std::max(last, rows[r0 + r].position);
    for (size_t d0 = first_dim; d0 < hd; d0 += lanes) {
      V acc[kRowsPerPass];
      for (int r = 0; r < kRowsPerPass; ++r) acc[r] = hn::Zero(d);
      for (int j = 0; j <= last; ++j) {
        const V v = LoadKv(d, v_rows[j], dtype, d0, hd);
        for (int r = 0; r < mr; ++r) {
          if (j > rows[r0 + r].position) continue;
          acc[r] = hn::MulAdd(hn::Set(d, probs[(r0 + r) * stride + j]), v, acc[r]);
        }
      }
      for (int r = 0; r < mr; ++r) {
        float* out = rows[r0 + r].out + d0;
        if (d0 + lanes <= hd) {
          hn::StoreU(acc[r], d, out);
        } else {
          StoreTail(acc[r], d, out, hd - d0);
        }
      }
    }
  }
}

template <DType kType>
void ValueTiles(const AttentionRow* rows, int n, const uint8_t* const* v_rows, size_t full_dims,
                const float* probs, size_t stride) {
  const size_t tile_dims = kTileVecs * hn::Lanes(D());
  for (size_t d0 = 0; d0 < full_dims; d0 += tile_dims) {
    for (int r0 = 0; r0 < n; r0 += kTileRows) {
      const int mr = std::min(kTileRows, n - r0);
      kValueTiles<kType>[mr - 1](rows + r0, v_rows, d0, probs + r0 * stride, stride);
    }
  }
}

void AttendValuesImpl(const AttentionRow* rows, int n, const uint8_t* const* v_rows, DType dtype,
                      int head_dim, const float* probs, size_t stride) {
  const size_t hd = static_cast<size_t>(head_dim);
  const size_t tile_dims = kTileVecs * hn::Lanes(D());
  const size_t full_dims = hd / tile_dims * tile_dims;
  switch (dtype) {
    case DType::kF32:
      ValueTiles<DType::kF32>(rows, n, v_rows, full_dims, probs, stride);
      break;
    case DType::kF16:
      ValueTiles<DType::kF16>(rows, n, v_rows, full_dims, probs, stride);
      break;
    case DType::kBF16:
      ValueTiles<DType::kBF16>(rows, n, v_rows, full_dims, probs, stride);
      break;
  }
  if (full_dims < hd) ValueRemainder(rows, n, v_rows, dtype, full_dims, hd, probs, stride);
}

}  // namespace

const SimdKernels kSimdKernels = {
    &RmsNormImpl,   &SiluMulImpl,      &ExpInPlaceSumImpl,         &ScaleMaxImpl,
    &AddScalarImpl, &AttendValuesImpl, hwy::TargetName(HWY_TARGET)};

}  // namespace pdserve::engine::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pdserve::engine {

const SimdKernels* SimdKernelsFor(CpuIsa isa) {
  switch (isa) {
#if HWY_TARGETS & HWY_AVX3
    case CpuIsa::kAvx512:
      return &N_AVX3::kSimdKernels;
#endif
#if HWY_TARGETS & HWY_AVX2
    case CpuIsa::kAvx2:
      return &N_AVX2::kSimdKernels;
#endif
#if HWY_TARGETS & HWY_NEON
    case CpuIsa::kNeon:
      return &N_NEON::kSimdKernels;
#endif
    default:
      return nullptr;
  }
}

}  // namespace pdserve::engine
#endif  // HWY_ONCE
