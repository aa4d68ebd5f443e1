#include "engine/half.h"

#include <cmath>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
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
#elif defined(__aarch64__)

// ARMv8-A's floating point converts between f16 and f32 in hardware (FCVT, and FCVTL/FCVTN on
// vectors), exactly and with round-to-nearest-even on narrowing: what the scalar code does,
// NaN payloads apart.
void HalfToFloatNeon(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1q_f32(out + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(in + i))));
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

void FloatToHalfNeon(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1_u16(out + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(in + i))));
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}
#endif  // __x86_64__, __aarch64__

}  // namespace

float HalfToFloat(uint16_t h) {
#if defined(__aarch64__)
  __fp16 half;
  std::memcpy(&half, &h, 2);
  return half;  // FCVT.
#else
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
#endif
}

uint16_t FloatToHalf(float f) {
#if defined(__aarch64__)
  if (!std::isnan(f)) {                          // A NaN keeps the scalar code's quiet NaN below.
    const __fp16 half = static_cast<__fp16>(f);  // FCVT, round to nearest even.
    uint16_t h;
    std::memcpy(&h, &half, 2);
    return h;
  }
#endif
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
#elif defined(__aarch64__)
  return HalfToFloatNeon(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

void FloatToHalf(const float* in, uint16_t* out, size_t n) {
#if defined(__x86_64__)
  if (CpuHasF16c()) return FloatToHalfF16c(in, out, n);
#elif defined(__aarch64__)
  return FloatToHalfNeon(in, out, n);
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
