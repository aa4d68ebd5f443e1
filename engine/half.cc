#include "engine/half.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace pdserve::engine {

bool CpuHasF16c() {
#if defined(__x86_64__)
  // CPUID leaf 1: ECX bit 29 is F16C (clang's __builtin_cpu_supports does not know "f16c").
  static const bool has = [] {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    return (ecx & (1u << 29)) != 0 && __builtin_cpu_supports("avx");
  }();
  return has;
#else
  return false;  // An x86 extension.
#endif
}

namespace {

#if defined(__x86_64__)

__attribute__((target("f16c,avx"))) void HalfToFloatF16c(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

__attribute__((target("f16c,avx"))) void FloatToHalfF16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}
#endif  // __x86_64__

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // Subnormal: normalise.
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ff;
      bits = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;   // NaN.
  if (abs >= 0x47800000u) return sign | 0x7c00;  // Overflow (>= 65536) or inf.
  if (abs < 0x33000000u) return sign;            // Rounds to zero.
  int exponent = static_cast<int>(abs >> 23) - 127 + 15;
  uint32_t mantissa = (abs & 0x7fffff) | 0x800000;
  if (exponent <= 0) {  // Subnormal result.
    const int shift = 14 - exponent;
    const uint32_t rounded = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    uint32_t out = rounded + ((rest > half || (rest == half && (rounded & 1))) ? 1 : 0);
    return sign | static_cast<uint16_t>(out);
  }
  uint32_t out = (static_cast<uint32_t>(exponent) << 10) | ((mantissa >> 13) & 0x3ff);
  const uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (out & 1))) ++out;  // May carry into the exponent.
  return sign | static_cast<uint16_t>(out);
}

void HalfToFloat(const uint16_t* in, float* out, size_t n) {
#if defined(__x86_64__)
  if (CpuHasF16c()) return HalfToFloatF16c(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

void FloatToHalf(const float* in, uint16_t* out, size_t n) {
#if defined(__x86_64__)
  if (CpuHasF16c()) return FloatToHalfF16c(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

void Bf16ToFloat(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
}

void FloatToBf16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
}

}  // namespace pdserve::engine
