#include "engine/cpu/gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "engine/cpu/simd_gemm.h"
#include "engine/cpu/thread_pool.h"
#include "engine/half.h"

namespace pdserve::engine {
namespace {

constexpr int kPanel = PackedMatrix::kPanelWidth;
// K is processed in blocks so a panel's slice stays in L1/L2 while every row tile of X
// passes over it. Accumulators are stored and reloaded between blocks, which is exact, so
// blocking does not change any result.
constexpr int kBlockK = 256;
// Panels per group: kBlockK * kGroupPanels * kPanel * 4 bytes = 256 KiB, inside L2.
constexpr int kGroupPanels = 8;
// Up to this many rows, a panel is read whole in one pass (no K blocking): X is a few rows
// that stay in L1 anyway, and one long sequential stream per panel is what a
// bandwidth-bound decode step wants.
constexpr int kStreamRows = 4;

// Where column j of a bfloat16 panel row is stored: within each 128-bit lane L of a 32-word
// row, words 0..3 are columns 4L..4L+3 and words 4..7 are columns 16+4L..16+4L+3, so that a
// word unpack with zeros (which widens the low, resp. high, four words of each lane into
// floats) yields columns 0..15, resp. 16..31, in order. On AVX2 the same holds per 256-bit half.
constexpr int BfloatSlot(int j) {
  return j < 16 ? (j / 4) * 8 + j % 4 : ((j - 16) / 4) * 8 + 4 + (j - 16) % 4;
}

using KernelFn = GemmKernelFn;
// A kernel that also fetches `lines` cache lines from `next` into L2 as it runs.
using PrefetchingKernelFn = void (*)(const float* a, int lda, const uint8_t* b, int kc, float* c,
                                     int ldc, int ncols, bool first, const uint8_t* next,
                                     int lines);

// The intrinsics kernels exist in x86-64 builds only; elsewhere the portable one runs.
#if defined(__x86_64__)
// ---- AVX-512: MR rows x 32 columns, two zmm accumulators per row. ----
constexpr int kMrAvx512 = 12;

template <int MR, WeightType W>
__attribute__((target("avx512f,avx512bw"))) void KernelAvx512(const float* a, int lda,
                                                              const uint8_t* b, int kc, float* c,
                                                              int ldc, int ncols, bool first) {
  const __mmask16 mask0 = ncols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << ncols) - 1);
  const __mmask16 mask1 =
      ncols >= 32 ? 0xFFFF : (ncols <= 16 ? 0 : static_cast<__mmask16>((1u << (ncols - 16)) - 1));
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    if (first) {
      acc0[r] = _mm512_setzero_ps();
      acc1[r] = _mm512_setzero_ps();
    } else {
      acc0[r] = _mm512_maskz_loadu_ps(mask0, c + r * ldc);
      acc1[r] = _mm512_maskz_loadu_ps(mask1, c + r * ldc + 16);
    }
  }
  const __m512i zero = _mm512_setzero_si512();
  for (int k = 0; k < kc; ++k) {
    __m512 b0, b1;
    if constexpr (W == WeightType::kF32) {
      const float* row = reinterpret_cast<const float*>(b) + k * kPanel;
      b0 = _mm512_load_ps(row);
      b1 = _mm512_load_ps(row + 16);
    } else if constexpr (W == WeightType::kBF16) {
      // A bfloat16 is the top half of a float: interleaving zeros below it widens it exactly.
      const __m512i raw =
          _mm512_load_si512(reinterpret_cast<const uint16_t*>(b) + static_cast<size_t>(k) * kPanel);
      b0 = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, raw));
      b1 = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, raw));
    } else {
      const uint16_t* row = reinterpret_cast<const uint16_t*>(b) + static_cast<size_t>(k) * kPanel;
      b0 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(row)));
      b1 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(row + 16)));
    }
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + k]);
      acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, mask0, acc0[r]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, mask1, acc1[r]);
  }
}

template <WeightType W, int... Rs>
constexpr auto MakeAvx512Table(std::integer_sequence<int, Rs...>) {
  return std::array<KernelFn, sizeof...(Rs)>{&KernelAvx512<Rs + 1, W>...};
}
template <WeightType W>
constexpr auto kAvx512Kernels = MakeAvx512Table<W>(std::make_integer_sequence<int, kMrAvx512>{});

// ---- AVX2 + FMA (+ F16C): MR rows x 32 columns, four ymm accumulators per row. ----
constexpr int kMrAvx2 = 3;

// `prefetch`, when set: `prefetch_lines` cache lines from there are fetched into L2 as the
// k loop runs (a few each k), the next block's panel, while this one computes from cache.
template <int MR, WeightType W>
__attribute__((target("avx2,fma,f16c"))) void KernelAvx2Prefetching(
    const float* a, int lda, const uint8_t* b, int kc, float* c, int ldc, int ncols, bool first,
    const uint8_t* prefetch, int prefetch_lines) {
  // A full panel's rows of C are loaded and stored as they are; a partial one (the matrix's
  // last panel) goes through a zero-padded tile. (Every call went through the tile, by a
  // scalar loop: a tenth of the kernel's time at batch 8, where K blocking calls it again
  // for every 256 k.)
  alignas(32) float tile[MR][kPanel];
  const bool full = ncols == kPanel;
  __m256 acc[MR][4];
  for (int r = 0; r < MR; ++r) {
    if (first) {
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_setzero_ps();
    } else if (full) {
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_loadu_ps(c + r * ldc + v * 8);
    } else {
      for (int j = 0; j < kPanel; ++j) tile[r][j] = j >= ncols ? 0.f : c[r * ldc + j];
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_load_ps(&tile[r][v * 8]);
    }
  }
  const __m256i zero = _mm256_setzero_si256();
  const int lines_per_k = prefetch == nullptr ? 0 : (prefetch_lines + kc - 1) / kc;
  for (int k = 0; k < kc; ++k) {
    for (int l = 0; l < lines_per_k && prefetch_lines > 0; ++l, --prefetch_lines) {
      _mm_prefetch(reinterpret_cast<const char*>(prefetch), _MM_HINT_T1);
      prefetch += 64;
    }
    __m256 bv[4];
    if constexpr (W == WeightType::kF32) {
      const float* row = reinterpret_cast<const float*>(b) + k * kPanel;
      for (int v = 0; v < 4; ++v) bv[v] = _mm256_load_ps(row + v * 8);
    } else if constexpr (W == WeightType::kBF16) {
      const uint16_t* row = reinterpret_cast<const uint16_t*>(b) + static_cast<size_t>(k) * kPanel;
      const __m256i lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(row));
      const __m256i hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(row + 16));
      bv[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, lo));  // Columns 0..7.
      bv[1] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, hi));  // 8..15.
      bv[2] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, lo));  // 16..23.
      bv[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, hi));  // 24..31.
    } else {
      const uint16_t* row = reinterpret_cast<const uint16_t*>(b) + static_cast<size_t>(k) * kPanel;
      for (int v = 0; v < 4; ++v)
        bv[v] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(row + v * 8)));
    }
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_set1_ps(a[r * lda + k]);
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    if (full) {
      for (int v = 0; v < 4; ++v) _mm256_storeu_ps(c + r * ldc + v * 8, acc[r][v]);
    } else {
      for (int v = 0; v < 4; ++v) _mm256_store_ps(&tile[r][v * 8], acc[r][v]);
      for (int j = 0; j < ncols; ++j) c[r * ldc + j] = tile[r][j];
    }
  }
}

template <WeightType W>
constexpr std::array<PrefetchingKernelFn, kMrAvx2> kAvx2PrefetchingKernels = {
    &KernelAvx2Prefetching<1, W>, &KernelAvx2Prefetching<2, W>, &KernelAvx2Prefetching<3, W>};
#endif  // __x86_64__

// The float value of element (k, column j) of a panel.
float PanelValue(const uint8_t* b, WeightType type, int k, int j) {
  switch (type) {
    case WeightType::kF32:
      return reinterpret_cast<const float*>(b)[k * kPanel + j];
    case WeightType::kBF16:
      return Bf16ToFloat(reinterpret_cast<const uint16_t*>(b)[k * kPanel + BfloatSlot(j)]);
    case WeightType::kF16:
      return HalfToFloat(reinterpret_cast<const uint16_t*>(b)[k * kPanel + j]);
  }
  return 0.f;
}

// ---- Portable fallback: the same sequential fma chain per element. ----
void KernelScalar(const float* a, int lda, const uint8_t* b, WeightType type, int kc, float* c,
                  int ldc, int ncols, bool first, int mr) {
  for (int r = 0; r < mr; ++r) {
    for (int j = 0; j < ncols; ++j) {
      float acc = first ? 0.f : c[r * ldc + j];
      for (int k = 0; k < kc; ++k) acc = std::fma(a[r * lda + k], PanelValue(b, type, k, j), acc);
      c[r * ldc + j] = acc;
    }
  }
}

#if defined(__x86_64__)
const KernelFn* Avx512Table(WeightType type) {
  switch (type) {
    case WeightType::kBF16:
      return kAvx512Kernels<WeightType::kBF16>.data();
    case WeightType::kF16:
      return kAvx512Kernels<WeightType::kF16>.data();
    default:
      return kAvx512Kernels<WeightType::kF32>.data();
  }
}

const PrefetchingKernelFn* Avx2PrefetchingTable(WeightType type) {
  switch (type) {
    case WeightType::kBF16:
      return kAvx2PrefetchingKernels<WeightType::kBF16>.data();
    case WeightType::kF16:
      return kAvx2PrefetchingKernels<WeightType::kF16>.data();
    default:
      return kAvx2PrefetchingKernels<WeightType::kF32>.data();
  }
}
#endif  // __x86_64__

// Computes Y[:, panels p0..p1) for all rows. Panel p starts p * k_total * kPanel elements
// into `panels`.
void GemmPanelRange(CpuIsa isa, const float* x, int m, int ldx, const uint8_t* panels,
                    WeightType type, int n_total, int k_total, float* y, int ldy, int p0, int p1) {
  const KernelFn* kernels = nullptr;
  // The AVX2 kernels, which can also fetch the next block of panels (below).
  const PrefetchingKernelFn* prefetching = nullptr;
  int mr = 4;
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx512) {
    kernels = Avx512Table(type);
    mr = kMrAvx512;
  } else if (isa == CpuIsa::kAvx2) {
    prefetching = Avx2PrefetchingTable(type);
    mr = kMrAvx2;
  }
#endif
  // Without intrinsics kernels for the set (NEON): Highway's.
  if (const SimdGemm* simd = isa == CpuIsa::kNeon ? SimdGemmFor(isa) : nullptr) {
    kernels = simd->kernels[static_cast<int>(type)];
    mr = SimdGemm::kMaxRows;
  }
  // With several row tiles, the first reads each block of panels from memory and the others
  // from cache; the AVX2 kernels of the later tiles fetch the next block meanwhile, so the
  // next first tile finds it in L2 too. (The AVX-512 tiles are 12 rows: a decode batch is
  // one tile.)
  const int tiles = (m + mr - 1) / mr;
  const size_t elem = WeightTypeBytes(type);
  const int block_k = m <= kStreamRows ? k_total : kBlockK;
  for (int k0 = 0; k0 < k_total; k0 += block_k) {
    const int kc = std::min(block_k, k_total - k0);
    const bool first = k0 == 0;
    for (int g0 = p0; g0 < p1; g0 += kGroupPanels) {
      const int g1 = std::min(p1, g0 + kGroupPanels);
      // The block after this one: the next group of panels, or the first of the next k block.
      const int next_g0 = g1 < p1 ? g1 : p0;
      const int next_k0 = g1 < p1 ? k0 : k0 + block_k;
      const int next_g1 = std::min(p1, next_g0 + kGroupPanels);
      const size_t next_panel_bytes =
          next_k0 < k_total
              ? static_cast<size_t>(std::min(block_k, k_total - next_k0)) * kPanel * elem
              : 0;
      const int next_lines = static_cast<int>((next_panel_bytes + 63) / 64);
      const int lines_per_tile = tiles > 1 ? (next_lines + tiles - 2) / (tiles - 1) : 0;
      for (int m0 = 0; m0 < m; m0 += mr) {
        const int rows = std::min(mr, m - m0);
        const int tile = m0 / mr;
        const float* a = x + static_cast<size_t>(m0) * ldx + k0;
        for (int p = g0; p < g1; ++p) {
          const uint8_t* b = panels + ((static_cast<size_t>(p) * k_total + k0) * kPanel) * elem;
          float* c = y + static_cast<size_t>(m0) * ldy + p * kPanel;
          const int ncols = std::min(kPanel, n_total - p * kPanel);
          const int q = next_g0 + (p - g0);  // This panel's counterpart in the next block.
          if (prefetching != nullptr) {
            const uint8_t* next = nullptr;  // Nothing to fetch: the plain kernel.
            int lines = 0;
            if (tile > 0 && next_lines > 0 && q < next_g1) {
              // The later tiles share the counterpart's lines: each fetches its part.
              const int from = (tile - 1) * lines_per_tile;
              lines = std::max(0, std::min(lines_per_tile, next_lines - from));
              next = panels + ((static_cast<size_t>(q) * k_total + next_k0) * kPanel) * elem +
                     static_cast<size_t>(from) * 64;
            }
            prefetching[rows - 1](a, ldx, b, kc, c, ldy, ncols, first, next, lines);
          } else if (kernels != nullptr) {
            kernels[rows - 1](a, ldx, b, kc, c, ldy, ncols, first);
          } else {
            KernelScalar(a, ldx, b, type, kc, c, ldy, ncols, first, rows);
          }
        }
      }
    }
  }
}

}  // namespace

const char* WeightTypeName(WeightType type) {
  switch (type) {
    case WeightType::kF32:
      return "f32";
    case WeightType::kBF16:
      return "bf16";
    case WeightType::kF16:
      return "f16";
  }
  return "?";
}

size_t WeightTypeBytes(WeightType type) { return type == WeightType::kF32 ? 4 : 2; }

PackedMatrix PackedMatrix::Pack(const float* w, int n, int k, int ldw, WeightType type) {
  PackedMatrix out;
  out.n_ = n;
  out.k_ = k;
  out.type_ = type;
  out.panels_ = (n + kPanel - 1) / kPanel;
  out.data_.Resize(static_cast<size_t>(out.panels_) * k * kPanel * WeightTypeBytes(type));
  for (int p = 0; p < out.panels_; ++p) {
    const size_t base = static_cast<size_t>(p) * k * kPanel;
    const int cols = std::min(kPanel, n - p * kPanel);
    for (int j = 0; j < cols; ++j) {
      const float* src = w + static_cast<size_t>(p * kPanel + j) * ldw;
      switch (type) {
        case WeightType::kF32: {
          float* dst = reinterpret_cast<float*>(out.data_.data()) + base;
          for (int kk = 0; kk < k; ++kk) dst[kk * kPanel + j] = src[kk];
          break;
        }
        case WeightType::kBF16: {
          uint16_t* dst = reinterpret_cast<uint16_t*>(out.data_.data()) + base;
          for (int kk = 0; kk < k; ++kk) dst[kk * kPanel + BfloatSlot(j)] = FloatToBf16(src[kk]);
          break;
        }
        case WeightType::kF16: {
          uint16_t* dst = reinterpret_cast<uint16_t*>(out.data_.data()) + base;
          for (int kk = 0; kk < k; ++kk) dst[kk * kPanel + j] = FloatToHalf(src[kk]);
          break;
        }
      }
    }
  }
  return out;
}

float PackedMatrix::At(int n, int k) const {
  const int p = n / kPanel;
  const uint8_t* panel =
      data_.data() + static_cast<size_t>(p) * k_ * kPanel * WeightTypeBytes(type_);
  return PanelValue(panel, type_, k, n % kPanel);
}

void Gemm(CpuIsa isa, const float* x, int m, int ldx, const PackedMatrix& w, float* y, int ldy,
          ThreadPool* pool) {
  if (m <= 0 || w.rows() == 0) return;
  const int panels = w.panels();
  const uint8_t* data = static_cast<const uint8_t*>(w.data());
  if (pool == nullptr || pool->size() == 1 || panels < 2) {
    GemmPanelRange(isa, x, m, ldx, data, w.type(), w.rows(), w.cols(), y, ldy, 0, panels);
    return;
  }
  pool->ParallelFor(panels, [&](int p0, int p1) {
    GemmPanelRange(isa, x, m, ldx, data, w.type(), w.rows(), w.cols(), y, ldy, p0, p1);
  });
}

void GemmPanels(CpuIsa isa, const float* x, int m, int ldx, const float* panels, int n, int k,
                float* y, int ldy) {
  if (m <= 0 || n <= 0) return;
  GemmPanelRange(isa, x, m, ldx, reinterpret_cast<const uint8_t*>(panels), WeightType::kF32, n, k,
                 y, ldy, 0, (n + kPanel - 1) / kPanel);
}

}  // namespace pdserve::engine
