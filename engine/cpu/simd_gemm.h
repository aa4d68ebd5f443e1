// The GEMM's register-tiled microkernel written once in Google Highway, for the instruction
// sets without a hand-written one: Arm's NEON runs it (gemm.cc); x86 keeps its AVX-512 and
// AVX2 intrinsics kernels and has it built for its tests, which check it natively against
// the scalar chain. A call computes C[r][j] (+)= sum over k of A[r][k] * B[k][j] for up to
// kMaxRows rows and one packed panel of 32 columns (gemm.h's layout for f32, bf16 and f16),
// each element one fused multiply-add chain in the order of k: exactly what the scalar
// kernel computes, so the batch invariance gemm.h describes holds on every path.
// Thread-safety: stateless.
#ifndef PDSERVE_ENGINE_CPU_SIMD_GEMM_H_
#define PDSERVE_ENGINE_CPU_SIMD_GEMM_H_

#include <cstdint>

#include "engine/cpu/cpu_isa.h"
#include "engine/cpu/gemm.h"

namespace pdserve::engine {

// a: rows of `lda` floats (k from 0), b: a panel of `kc` k-rows, c: rows of `ldc` floats of
// which the first `ncols` (<= 32) are written; `first`: start from zero rather than from c.
using GemmKernelFn = void (*)(const float* a, int lda, const uint8_t* b, int kc, float* c, int ldc,
                              int ncols, bool first);

struct SimdGemm {
  static constexpr int kMaxRows = 3;  // 3 x 32 accumulators fit 32 NEON registers.
  // kernels[weight type][rows - 1], the weight type as WeightType's value.
  GemmKernelFn kernels[3][kMaxRows];
  const char* target;  // Highway's name of the compiled target, e.g. "NEON".
};

// The Highway microkernels for `isa`, or null when this build has none for it.
const SimdGemm* SimdGemmFor(CpuIsa isa);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_CPU_SIMD_GEMM_H_
