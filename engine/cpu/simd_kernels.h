// The row kernels and attention's value pass written once in Google Highway (portable SIMD,
// compiled for every instruction set it supports in this translation unit) and selected by
// CpuIsa: the AVX2 path (and, where built, Arm's) runs them instead of scalar code. The
// AVX-512 path keeps its hand-written kernels (kernels.cc, attention.cc), which were measured
// faster. Each kernel keeps a fixed order of operations for a given instruction set: lane-wise
// accumulation over fixed-size chunks, then a fixed reduction, so a row's result never depends
// on its batch.
// Thread-safety: stateless.
#ifndef PDSERVE_ENGINE_CPU_SIMD_KERNELS_H_
#define PDSERVE_ENGINE_CPU_SIMD_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "common/kv_layout.h"
#include "engine/cpu/cpu_isa.h"

namespace pdserve::engine {

struct AttentionRow;

struct SimdKernels {
  // As kernels.h: y = x / sqrt(mean(x^2) + eps) * w; returns the scale.
  float (*rms_norm)(const float* x, const float* weight, float eps, int dim, float* y);
  // out[i] = silu(gate[i]) * up[i].
  void (*silu_mul)(const float* gate, const float* up, int n, float* out);
  // x[i] = exp(x[i]); returns their sum.
  float (*exp_in_place_sum)(float* x, int n);
  // x[i] *= scale; returns the largest result (exact, as max is).
  float (*scale_max)(float* x, float scale, int n);
  // x[i] += add.
  void (*add_scalar)(float* x, float add, int n);
  // Attention's value pass for `n` rows of one KV head: rows[r].out[d] = sum over j = 0 ..
  // rows[r].position of probs[r * stride + j] * V[j][d], one fused multiply-add chain per
  // element in the order of j. V rows are `dtype` (f32, f16 or bf16) of head_dim elements.
  void (*attend_values)(const AttentionRow* rows, int n, const uint8_t* const* v_rows, DType dtype,
                        int head_dim, const float* probs, size_t stride);
  const char* target;  // Highway's name of the compiled target, e.g. "AVX2".
};

// The Highway kernels for `isa`, or null when this build has none for it (the caller then
// uses its own: the AVX-512 intrinsics, or scalar code).
const SimdKernels* SimdKernelsFor(CpuIsa isa);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_CPU_SIMD_KERNELS_H_
