#include "engine/cpu/attention.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "engine/cpu/gemm.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/simd_kernels.h"
#include "engine/half.h"

namespace pdserve::engine {
namespace {

// ---------------------------------------------------------------------------------------
// AVX-512 path (x86-64 builds only; CpuIsa::kAvx512 is never chosen elsewhere).
#if defined(__x86_64__)
#define PDS_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,f16c")))

PDS_AVX512 inline __mmask16 ChunkMask(int head_dim, int chunk) {
  const int n = head_dim - chunk * 16;
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// Loads 16 elements (masked) of a cached row as floats.
template <DType D>
PDS_AVX512 inline __m512 LoadKv(const uint8_t* row, int chunk, __mmask16 mask) {
  if constexpr (D == DType::kF32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + chunk * 16);
  } else {
    const __m256i raw =
        _mm256_maskz_loadu_epi16(mask, reinterpret_cast<const uint16_t*>(row) + chunk * 16);
    if constexpr (D == DType::kF16) {
      return _mm512_cvtph_ps(raw);
    } else {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
    }
  }
}
#endif  // __x86_64__

constexpr int kPanel =
    PackedMatrix::kPanelWidth;  // 32 keys per score panel / dims per value panel.
constexpr int kRows = 12;       // Rows per value microkernel tile.

// The rows' queries made contiguous in scratch (the score GEMM's X), and the key panels sized
// for `keys`.
void GatherQueries(const AttentionRow* rows, int n, int head_dim, int keys,
                   AttentionScratch* scratch) {
  scratch->queries.resize(static_cast<size_t>(n) * head_dim);
  for (int r = 0; r < n; ++r) {
    std::memcpy(scratch->queries.data() + static_cast<size_t>(r) * head_dim, rows[r].q,
                head_dim * sizeof(float));
  }
  scratch->key_panels.EnsureSize(static_cast<size_t>((keys + kPanel - 1) / kPanel) * head_dim *
                                 kPanel);
}

// Softmax over each row's own prefix of its scores: scaled, shifted by the row's maximum and
// exponentiated in place; inv_sum[r] is one over the row's sum.
void Softmax(CpuIsa isa, const AttentionRow* rows, int n, float scale, float* scores, size_t stride,
             float* inv_sum) {
  for (int r = 0; r < n; ++r) {
    float* s = scores + r * stride;
    const int count = rows[r].position + 1;
    const float max = kernels::ScaleInPlaceMax(isa, s, scale, count);
    kernels::AddInPlace(isa, s, -max, count);
    inv_sum[r] = 1.0f / kernels::ExpInPlaceSum(isa, s, count);
  }
}

#if defined(__x86_64__)
// Transposes a 16x16 block held in 16 registers: afterwards r[j][i] is the old r[i][j].
PDS_AVX512 inline void Transpose16x16(__m512* r) {
  __m512 a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {
    const __m512d lo0 = _mm512_castps_pd(a[4 * g]), lo1 = _mm512_castps_pd(a[4 * g + 2]);
    const __m512d hi0 = _mm512_castps_pd(a[4 * g + 1]), hi1 = _mm512_castps_pd(a[4 * g + 3]);
    b[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo0, lo1));
    b[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo0, lo1));
    b[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi0, hi1));
    b[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi0, hi1));
  }
  // b[4g + e], 128-bit lane L, holds rows 4g..4g+3 of column 4L + e.
  for (int e = 0; e < 4; ++e) {
    const __m512 c = _mm512_shuffle_f32x4(b[e], b[4 + e], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 d = _mm512_shuffle_f32x4(b[e], b[4 + e], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512 c2 = _mm512_shuffle_f32x4(b[8 + e], b[12 + e], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 d2 = _mm512_shuffle_f32x4(b[8 + e], b[12 + e], _MM_SHUFFLE(3, 1, 3, 1));
    r[e] = _mm512_shuffle_f32x4(c, c2, _MM_SHUFFLE(2, 0, 2, 0));
    r[8 + e] = _mm512_shuffle_f32x4(c, c2, _MM_SHUFFLE(3, 1, 3, 1));
    r[4 + e] = _mm512_shuffle_f32x4(d, d2, _MM_SHUFFLE(2, 0, 2, 0));
    r[12 + e] = _mm512_shuffle_f32x4(d, d2, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// Packs keys [0, keys) transposed: panels[p][d][lane] = K[p * 32 + lane][d], zero-padded.
template <DType D>
PDS_AVX512 void PackKeys(const uint8_t* const* k_rows, int keys, int head_dim, float* panels) {
  const int num_panels = (keys + kPanel - 1) / kPanel;
  const int chunks = (head_dim + 15) / 16;
  __m512 block[16];
  for (int p = 0; p < num_panels; ++p) {
    float* panel = panels + static_cast<size_t>(p) * head_dim * kPanel;
    for (int half = 0; half < 2; ++half) {
      const int first = p * kPanel + half * 16;
      const int count = std::max(0, std::min(16, keys - first));
      for (int c = 0; c < chunks; ++c) {
        const __mmask16 mask = ChunkMask(head_dim, c);
        for (int i = 0; i < 16; ++i) {
          block[i] = i < count ? LoadKv<D>(k_rows[first + i], c, mask) : _mm512_setzero_ps();
        }
        Transpose16x16(block);
        const int dims = std::min(16, head_dim - c * 16);
        for (int d = 0; d < dims; ++d) {
          _mm512_store_ps(panel + static_cast<size_t>(c * 16 + d) * kPanel + half * 16, block[d]);
        }
      }
    }
  }
}

// out[r][c0*32 .. +32) = sum_j probs[r][j] * v_j[...], one FMA chain per element over
// j = 0..position_r in order (rows share the loads while all of them still need j).
template <DType D, int MR>
PDS_AVX512 void ValueKernel(const AttentionRow* rows, const uint8_t* const* v_rows, int head_dim,
                            int panel, const float* probs, size_t stride) {
  const int d0 = panel * kPanel;
  const __mmask16 m0 = ChunkMask(head_dim, panel * 2);
  const __mmask16 m1 = d0 + 16 < head_dim ? ChunkMask(head_dim, panel * 2 + 1) : 0;
  __m512 acc0[MR], acc1[MR];
  int first_end = rows[0].position, last_end = rows[0].position;
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    acc0[r] = _mm512_setzero_ps();
    acc1[r] = _mm512_setzero_ps();
    first_end = std::min(first_end, rows[r].position);
    last_end = std::max(last_end, rows[r].position);
  }
  int j = 0;
  for (; j <= first_end; ++j) {  // Every row attends to j.
    const __m512 v0 = LoadKv<D>(v_rows[j], panel * 2, m0);
    const __m512 v1 = LoadKv<D>(v_rows[j], panel * 2 + 1, m1);
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512 p = _mm512_set1_ps(probs[r * stride + j]);
      acc0[r] = _mm512_fmadd_ps(p, v0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(p, v1, acc1[r]);
    }
  }
  for (; j <= last_end; ++j) {  // The causal tail: only rows whose position reaches j.
    const __m512 v0 = LoadKv<D>(v_rows[j], panel * 2, m0);
    const __m512 v1 = LoadKv<D>(v_rows[j], panel * 2 + 1, m1);
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      if (j > rows[r].position) continue;
      const __m512 p = _mm512_set1_ps(probs[r * stride + j]);
      acc0[r] = _mm512_fmadd_ps(p, v0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(p, v1, acc1[r]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(rows[r].out + d0, m0, acc0[r]);
    _mm512_mask_storeu_ps(rows[r].out + d0 + 16, m1, acc1[r]);
  }
}

template <DType D, int... Rs>
constexpr auto MakeValueKernels(std::integer_sequence<int, Rs...>) {
  using Fn = void (*)(const AttentionRow*, const uint8_t* const*, int, int, const float*, size_t);
  return std::array<Fn, sizeof...(Rs)>{&ValueKernel<D, Rs + 1>...};
}

template <DType D>
PDS_AVX512 void AttendAvx512(const AttentionRow* rows, int n, int head_dim, float scale,
                             const uint8_t* const* k_rows, const uint8_t* const* v_rows, int keys,
                             AttentionScratch* scratch, size_t stride) {
  float* scores = scratch->scores.data();
  // Scores: Q (rows x head_dim, made contiguous) times the transposed key panels.
  GatherQueries(rows, n, head_dim, keys, scratch);
  PackKeys<D>(k_rows, keys, head_dim, scratch->key_panels.data());
  GemmPanels(CpuIsa::kAvx512, scratch->queries.data(), n, head_dim, scratch->key_panels.data(),
             keys, head_dim, scores, static_cast<int>(stride));
  float* inv_sum = scratch->inv_sum.data();
  Softmax(CpuIsa::kAvx512, rows, n, scale, scores, stride, inv_sum);
  // Values: 12 rows x 32 dims at a time.
  static constexpr auto kernels_by_rows =
      MakeValueKernels<D>(std::make_integer_sequence<int, kRows>{});
  for (int panel = 0; panel < (head_dim + kPanel - 1) / kPanel; ++panel) {
    for (int r0 = 0; r0 < n; r0 += kRows) {
      const int mr = std::min(kRows, n - r0);
      kernels_by_rows[mr - 1](rows + r0, v_rows, head_dim, panel, scores + r0 * stride, stride);
    }
  }
  for (int r = 0; r < n; ++r) kernels::Scale(rows[r].out, inv_sum[r], head_dim);
}
#endif  // __x86_64__

// ---------------------------------------------------------------------------------------
// Highway path (AVX2, Arm): the AVX-512 path's structure with portable pieces. Scores through the
// packed-panel GEMM of the set (one FMA chain over head_dim per score), the softmax's exponent
// and the value pass from simd_kernels.h (one FMA chain over j per output element).

float LoadScalar(const uint8_t* row, DType dtype, int d);

// panels[p][d][lane] = K[p * 32 + lane][d] as floats, zero past `keys`.
void PackKeysPortable(const uint8_t* const* k_rows, int keys, int head_dim, DType dtype,
                      float* panels, std::vector<float>* widened_key) {
  const int num_panels = (keys + kPanel - 1) / kPanel;
  // A half-precision key is widened a row at a time by the bulk conversions (F16C or NEON for
  // f16), then strided into its panel; element by element, the f16 widening was scalar code.
  // The row buffer is the caller's scratch: no allocation per call.
  if (dtype != DType::kF32) widened_key->resize(head_dim);
  float* widened = widened_key->data();
  for (int p = 0; p < num_panels; ++p) {
    float* panel = panels + static_cast<size_t>(p) * head_dim * kPanel;
    for (int lane = 0; lane < kPanel; ++lane) {
      const int key = p * kPanel + lane;
      if (key >= keys) {
        for (int d = 0; d < head_dim; ++d) panel[d * kPanel + lane] = 0;
        continue;
      }
      const float* k = reinterpret_cast<const float*>(k_rows[key]);
      if (dtype != DType::kF32) {
        const auto* half = reinterpret_cast<const uint16_t*>(k_rows[key]);
        if (dtype == DType::kF16) {
          HalfToFloat(half, widened, head_dim);
        } else {
          Bf16ToFloat(half, widened, head_dim);
        }
        k = widened;
      }
      for (int d = 0; d < head_dim; ++d) panel[d * kPanel + lane] = k[d];
    }
  }
}

void AttendSimd(CpuIsa isa, const SimdKernels& simd, const AttentionRow* rows, int n, int head_dim,
                float scale, DType dtype, const uint8_t* const* k_rows,
                const uint8_t* const* v_rows, int keys, AttentionScratch* scratch, size_t stride) {
  float* scores = scratch->scores.data();
  GatherQueries(rows, n, head_dim, keys, scratch);
  PackKeysPortable(k_rows, keys, head_dim, dtype, scratch->key_panels.data(),
                   &scratch->widened_key);
  GemmPanels(isa, scratch->queries.data(), n, head_dim, scratch->key_panels.data(), keys, head_dim,
             scores, static_cast<int>(stride));
  float* inv_sum = scratch->inv_sum.data();
  Softmax(isa, rows, n, scale, scores, stride, inv_sum);
  simd.attend_values(rows, n, v_rows, dtype, head_dim, scores, stride);
  for (int r = 0; r < n; ++r) kernels::Scale(rows[r].out, inv_sum[r], head_dim);
}

// ---------------------------------------------------------------------------------------
// Portable path: the same structure in scalar code.

float LoadScalar(const uint8_t* row, DType dtype, int d) {
  switch (dtype) {
    case DType::kF32:
      return reinterpret_cast<const float*>(row)[d];
    case DType::kF16:
      return HalfToFloat(reinterpret_cast<const uint16_t*>(row)[d]);
    case DType::kBF16:
      return Bf16ToFloat(reinterpret_cast<const uint16_t*>(row)[d]);
  }
  return 0;
}

void AttendScalar(const AttentionRow* rows, int n, int head_dim, float scale, DType dtype,
                  const uint8_t* const* k_rows, const uint8_t* const* v_rows, float* scores,
                  size_t stride, float* inv_sum) {
  for (int r = 0; r < n; ++r) {
    float* s = scores + r * stride;
    const int keys = rows[r].position + 1;
    for (int j = 0; j < keys; ++j) {
      float acc = 0;
      for (int d = 0; d < head_dim; ++d)
        acc = std::fma(rows[r].q[d], LoadScalar(k_rows[j], dtype, d), acc);
      s[j] = acc * scale;
    }
    float max = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < keys; ++j) max = std::max(max, s[j]);
    for (int j = 0; j < keys; ++j) s[j] -= max;
    inv_sum[r] = 1.0f / kernels::ExpInPlaceSum(CpuIsa::kScalar, s, keys);
    for (int d = 0; d < head_dim; ++d) {
      float acc = 0;
      for (int j = 0; j < keys; ++j) acc = std::fma(s[j], LoadScalar(v_rows[j], dtype, d), acc);
      rows[r].out[d] = acc * inv_sum[r];
    }
  }
}

}  // namespace

void AttendRows(CpuIsa isa, const KvLayout& layout, const uint8_t* pool_base, int layer,
                int kv_head, const AttentionRow* rows, int num_rows, const int32_t* block_table,
                float scale, AttentionScratch* scratch) {
  if (num_rows <= 0) return;
  int keys = 0;
  for (int r = 0; r < num_rows; ++r) keys = std::max(keys, rows[r].position + 1);
  const size_t token_bytes = layout.token_bytes();
  const size_t head_offset =
      static_cast<size_t>(kv_head) * layout.head_dim * DTypeSize(layout.dtype);
  scratch->k_rows.resize(keys);
  scratch->v_rows.resize(keys);
  for (int j = 0; j < keys; ++j) {
    const int block = block_table[j / layout.block_size];
    const size_t within = static_cast<size_t>(j % layout.block_size) * token_bytes + head_offset;
    scratch->k_rows[j] = pool_base + layout.RegionOffset(layer, 0, block) + within;
    scratch->v_rows[j] = pool_base + layout.RegionOffset(layer, 1, block) + within;
  }
  const size_t stride = (static_cast<size_t>(keys) + 31) / 32 * 32;
  scratch->scores.resize(stride * num_rows);
  scratch->inv_sum.resize(num_rows);
  const uint8_t* const* k = scratch->k_rows.data();
  const uint8_t* const* v = scratch->v_rows.data();
  const int hd = layout.head_dim;
  if (isa != CpuIsa::kAvx512) {
    if (const SimdKernels* simd = SimdKernelsFor(isa)) {
      AttendSimd(isa, *simd, rows, num_rows, hd, scale, layout.dtype, k, v, keys, scratch, stride);
      return;
    }
    AttendScalar(rows, num_rows, hd, scale, layout.dtype, k, v, scratch->scores.data(), stride,
                 scratch->inv_sum.data());
    return;
  }
#if defined(__x86_64__)
  switch (layout.dtype) {
    case DType::kF32:
      AttendAvx512<DType::kF32>(rows, num_rows, hd, scale, k, v, keys, scratch, stride);
      break;
    case DType::kF16:
      AttendAvx512<DType::kF16>(rows, num_rows, hd, scale, k, v, keys, scratch, stride);
      break;
    case DType::kBF16:
      AttendAvx512<DType::kBF16>(rows, num_rows, hd, scale, k, v, keys, scratch, stride);
      break;
  }
#endif
}

}  // namespace pdserve::engine
