// Conversions between float and the 16-bit formats used by checkpoints and KV caches.
// f16: IEEE binary16, round-to-nearest-even on narrowing. bf16: the top 16 bits of a
// binary32, round-to-nearest-even on narrowing (NaN stays NaN).
// Thread-safety: stateless.
#ifndef PDSERVE_ENGINE_HALF_H_
#define PDSERVE_ENGINE_HALF_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pdserve::engine {

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);

inline float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

// Bulk conversions (vectorised where the CPU allows).
// Whether the CPU has F16C (and AVX) for the vector conversions.
bool CpuHasF16c();

void HalfToFloat(const uint16_t* in, float* out, size_t n);
void FloatToHalf(const float* in, uint16_t* out, size_t n);
void Bf16ToFloat(const uint16_t* in, float* out, size_t n);
void FloatToBf16(const float* in, uint16_t* out, size_t n);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_HALF_H_
