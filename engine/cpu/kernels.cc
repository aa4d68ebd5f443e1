#include "engine/cpu/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/cpu/simd_kernels.h"

namespace pdserve::engine::kernels {
namespace {

// The AVX-512 kernels exist on x86-64 only (CpuIsa::kAvx512 is never chosen elsewhere).
#if defined(__x86_64__)
#define PDS_AVX512 __attribute__((target("avx512f,avx512dq")))

PDS_AVX512 inline __mmask16 TailMask(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// exp(x) for x in float range, ~1 ulp (Cephes expf polynomial), 0 for x < -103.
PDS_AVX512 inline __m512 Exp512(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
  const __m512 ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-103.0f), _CMP_LT_OQ);
  x = _mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f));
  x = _mm512_max_ps(x, _mm512_set1_ps(-103.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512 result = _mm512_scalef_ps(p, n);
  return _mm512_mask_blend_ps(tiny, result, _mm512_setzero_ps());
}

PDS_AVX512 float RmsNorm512(const float* x, const float* w, float eps, int dim, float* y) {
  __m512 acc = _mm512_setzero_ps();
  for (int i = 0; i < dim; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(TailMask(dim - i), x + i);
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  const float ss = _mm512_reduce_add_ps(acc);
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
  const __m512 s = _mm512_set1_ps(scale);
  for (int i = 0; i < dim; i += 16) {
    const __mmask16 m = TailMask(dim - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), s);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
  }
  return scale;
}

PDS_AVX512 void SiluMul512(const float* gate, const float* up, int n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 e = Exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

PDS_AVX512 float ExpSum512(float* x, int n) {
  __m512 acc = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 e = Exp512(_mm512_maskz_loadu_ps(m, x + i));
    _mm512_mask_storeu_ps(x + i, m, e);
    acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(m, e));
  }
  return _mm512_reduce_add_ps(acc);
}

PDS_AVX512 float Dot512(const float* a, const float* b, int n) {
  __m512 acc = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

PDS_AVX512 void Axpy512(float w, const float* v, int n, float* out) {
  const __m512 wv = _mm512_set1_ps(w);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 o = _mm512_maskz_loadu_ps(m, out + i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, v + i), o));
  }
}
#endif  // __x86_64__

}  // namespace

void RmsNorm(CpuIsa isa, const float* x, const float* weight, float eps, int dim, float* y) {
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx512) {
    RmsNorm512(x, weight, eps, dim, y);
    return;
  }
#endif
  if (const SimdKernels* simd = SimdKernelsFor(isa)) {
    simd->rms_norm(x, weight, eps, dim, y);
    return;
  }
  float ss = 0;
  for (int i = 0; i < dim; ++i) ss = std::fma(x[i], x[i], ss);
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
  for (int i = 0; i < dim; ++i) y[i] = (x[i] * scale) * weight[i];
}

void Add(float* y, const float* b, int n) {
  for (int i = 0; i < n; ++i) y[i] += b[i];
}

void SiluMul(CpuIsa isa, const float* gate, const float* up, int n, float* out) {
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx512) {
    SiluMul512(gate, up, n, out);
    return;
  }
#endif
  if (const SimdKernels* simd = SimdKernelsFor(isa)) {
    simd->silu_mul(gate, up, n, out);
    return;
  }
  for (int i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

float ExpInPlaceSum(CpuIsa isa, float* x, int n) {
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx512) return ExpSum512(x, n);
#endif
  if (const SimdKernels* simd = SimdKernelsFor(isa)) return simd->exp_in_place_sum(x, n);
  float sum = 0;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i]);
    sum += x[i];
  }
  return sum;
}

float ScaleInPlaceMax(CpuIsa isa, float* x, float scale, int n) {
  if (const SimdKernels* simd = SimdKernelsFor(isa)) return simd->scale_max(x, scale, n);
  float max = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) {
    x[i] *= scale;
    max = std::max(max, x[i]);
  }
  return max;
}

void AddInPlace(CpuIsa isa, float* x, float add, int n) {
  if (const SimdKernels* simd = SimdKernelsFor(isa)) return simd->add_scalar(x, add, n);
  for (int i = 0; i < n; ++i) x[i] += add;
}

void ApplyRope(float* x, int num_heads, int head_dim, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int h = 0; h < num_heads; ++h) {
    float* v = x + h * head_dim;
    for (int i = 0; i < half; ++i) {
      const float a = v[i];
      const float b = v[i + half];
      v[i] = a * cos[i] - b * sin[i];
      v[i + half] = b * cos[i] + a * sin[i];
    }
  }
}

float Dot(CpuIsa isa, const float* a, const float* b, int n) {
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx512) return Dot512(a, b, n);
#endif
  float acc = 0;
  for (int i = 0; i < n; ++i) acc = std::fma(a[i], b[i], acc);
  return acc;
}

void Axpy(CpuIsa isa, float w, const float* v, int n, float* out) {
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx512) {
    Axpy512(w, v, n, out);
    return;
  }
#endif
  for (int i = 0; i < n; ++i) out[i] = std::fma(w, v[i], out[i]);
}

void Scale(float* out, float s, int n) {
  for (int i = 0; i < n; ++i) out[i] *= s;
}

}  // namespace pdserve::engine::kernels
