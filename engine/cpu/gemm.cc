#include "engine/cpu/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "engine/cpu/thread_pool.h"

namespace pdserve::engine {
namespace {

constexpr int kPanel = PackedMatrix::kPanelWidth;
// K is processed in blocks so a panel's slice stays in L1/L2 while every row tile of X
// passes over it. Accumulators are stored and reloaded between blocks, which is exact, so
// blocking does not change any result.
constexpr int kBlockK = 256;
// Panels per group: kBlockK * kGroupPanels * kPanel * 4 bytes = 256 KiB, inside L2.
constexpr int kGroupPanels = 8;

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

bool HasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

// ---- AVX-512: MR rows x 32 columns, two zmm accumulators per row. ----
constexpr int kMrAvx512 = 12;

template <int MR>
__attribute__((target("avx512f"))) void KernelAvx512(const float* a, int lda, const float* b,
                                                     int kc, float* c, int ldc, int ncols,
                                                     bool first) {
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
  for (int k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * kPanel);
    const __m512 b1 = _mm512_load_ps(b + k * kPanel + 16);
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

using KernelFn = void (*)(const float*, int, const float*, int, float*, int, int, bool);

template <int... Rs>
constexpr auto MakeAvx512Table(std::integer_sequence<int, Rs...>) {
  return std::array<KernelFn, sizeof...(Rs)>{&KernelAvx512<Rs + 1>...};
}
constexpr auto kAvx512Kernels = MakeAvx512Table(std::make_integer_sequence<int, kMrAvx512>{});

// ---- AVX2 + FMA: MR rows x 32 columns, four ymm accumulators per row. ----
constexpr int kMrAvx2 = 3;

template <int MR>
__attribute__((target("avx2,fma"))) void KernelAvx2(const float* a, int lda, const float* b, int kc,
                                                    float* c, int ldc, int ncols, bool first) {
  alignas(32) float tile[MR][kPanel];
  __m256 acc[MR][4];
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < kPanel; ++j) tile[r][j] = (first || j >= ncols) ? 0.f : c[r * ldc + j];
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_load_ps(&tile[r][v * 8]);
  }
  for (int k = 0; k < kc; ++k) {
    __m256 bv[4];
    for (int v = 0; v < 4; ++v) bv[v] = _mm256_load_ps(b + k * kPanel + v * 8);
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_set1_ps(a[r * lda + k]);
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < 4; ++v) _mm256_store_ps(&tile[r][v * 8], acc[r][v]);
    for (int j = 0; j < ncols; ++j) c[r * ldc + j] = tile[r][j];
  }
}

constexpr std::array<KernelFn, kMrAvx2> kAvx2Kernels = {&KernelAvx2<1>, &KernelAvx2<2>,
                                                        &KernelAvx2<3>};

// ---- Portable fallback: the same sequential fma chain per element. ----
void KernelScalar(const float* a, int lda, const float* b, int kc, float* c, int ldc, int ncols,
                  bool first, int mr) {
  for (int r = 0; r < mr; ++r) {
    for (int j = 0; j < ncols; ++j) {
      float acc = first ? 0.f : c[r * ldc + j];
      for (int k = 0; k < kc; ++k) acc = std::fma(a[r * lda + k], b[k * kPanel + j], acc);
      c[r * ldc + j] = acc;
    }
  }
}

// Computes Y[:, panels p0..p1) for all rows. Panel p starts at panels + p * k * kPanel.
void GemmPanelRange(const float* x, int m, int ldx, const float* panels, int n_total, int k_total,
                    float* y, int ldy, int p0, int p1) {
  const bool avx512 = HasAvx512();
  const bool avx2 = !avx512 && HasAvx2Fma();
  const int mr = avx512 ? kMrAvx512 : (avx2 ? kMrAvx2 : 4);
  for (int k0 = 0; k0 < k_total; k0 += kBlockK) {
    const int kc = std::min(kBlockK, k_total - k0);
    const bool first = k0 == 0;
    for (int g0 = p0; g0 < p1; g0 += kGroupPanels) {
      const int g1 = std::min(p1, g0 + kGroupPanels);
      for (int m0 = 0; m0 < m; m0 += mr) {
        const int rows = std::min(mr, m - m0);
        const float* a = x + static_cast<size_t>(m0) * ldx + k0;
        for (int p = g0; p < g1; ++p) {
          const float* b = panels + (static_cast<size_t>(p) * k_total + k0) * kPanel;
          float* c = y + static_cast<size_t>(m0) * ldy + p * kPanel;
          const int ncols = std::min(kPanel, n_total - p * kPanel);
          if (avx512) {
            kAvx512Kernels[rows - 1](a, ldx, b, kc, c, ldy, ncols, first);
          } else if (avx2) {
            kAvx2Kernels[rows - 1](a, ldx, b, kc, c, ldy, ncols, first);
          } else {
            KernelScalar(a, ldx, b, kc, c, ldy, ncols, first, rows);
          }
        }
      }
    }
  }
}

}  // namespace

PackedMatrix PackedMatrix::Pack(const float* w, int n, int k, int ldw) {
  PackedMatrix out;
  out.n_ = n;
  out.k_ = k;
  out.panels_ = (n + kPanel - 1) / kPanel;
  out.data_.Resize(static_cast<size_t>(out.panels_) * k * kPanel);
  for (int p = 0; p < out.panels_; ++p) {
    float* dst = out.data_.data() + static_cast<size_t>(p) * k * kPanel;
    const int cols = std::min(kPanel, n - p * kPanel);
    for (int j = 0; j < cols; ++j) {
      const float* src = w + static_cast<size_t>(p * kPanel + j) * ldw;
      for (int kk = 0; kk < k; ++kk) dst[kk * kPanel + j] = src[kk];
    }
  }
  return out;
}

void Gemm(const float* x, int m, int ldx, const PackedMatrix& w, float* y, int ldy,
          ThreadPool* pool) {
  if (m <= 0 || w.rows() == 0) return;
  const int panels = w.panels();
  const float* data = w.panel(0);
  if (pool == nullptr || pool->size() == 1 || panels < 2) {
    GemmPanelRange(x, m, ldx, data, w.rows(), w.cols(), y, ldy, 0, panels);
    return;
  }
  pool->ParallelFor(panels, [&](int p0, int p1) {
    GemmPanelRange(x, m, ldx, data, w.rows(), w.cols(), y, ldy, p0, p1);
  });
}

void GemmPanels(const float* x, int m, int ldx, const float* panels, int n, int k, float* y,
                int ldy) {
  if (m <= 0 || n <= 0) return;
  GemmPanelRange(x, m, ldx, panels, n, k, y, ldy, 0, (n + kPanel - 1) / kPanel);
}

}  // namespace pdserve::engine
