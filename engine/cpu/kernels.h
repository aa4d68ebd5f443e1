// Row-wise kernels of the CPU forward pass (RMSNorm, bias, residual add, SwiGLU, RoPE,
// softmax exponent). Every function works on one row at a time with a fixed order of
// operations, so a row's result never depends on its batch.
// Each takes the instruction set to run on (cpu_isa.h): AVX-512 intrinsics, Highway's kernels
// for the other sets it was built for (simd_kernels.h: AVX2), or portable C++.
// Thread-safety: stateless.
#ifndef PDSERVE_ENGINE_CPU_KERNELS_H_
#define PDSERVE_ENGINE_CPU_KERNELS_H_

#include <cstdint>

#include "engine/cpu/cpu_isa.h"

namespace pdserve::engine::kernels {

// y = x / sqrt(mean(x^2) + eps) * weight, over `dim` elements. y may alias x.
void RmsNorm(CpuIsa isa, const float* x, const float* weight, float eps, int dim, float* y);
// y[i] += b[i].
void Add(float* y, const float* b, int n);
// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
void SiluMul(CpuIsa isa, const float* gate, const float* up, int n, float* out);
// x[i] = exp(x[i]) for n elements; returns the sum of the results (accumulated in a fixed
// order: lane-wise over 16-element chunks, then a fixed reduction tree).
float ExpInPlaceSum(CpuIsa isa, float* x, int n);
// x[i] *= scale; returns the largest result. Every path gives the same results (one rounding
// per element; the maximum is exact).
float ScaleInPlaceMax(CpuIsa isa, float* x, float scale, int n);
// x[i] += add (one rounding per element: the same on every path).
void AddInPlace(CpuIsa isa, float* x, float add, int n);
// Rotates `num_heads` heads of `head_dim` (rotate-half convention of Hugging Face Llama):
// for i < head_dim/2, (x[i], x[i+h/2]) -> (x[i]c - x[i+h/2]s, x[i+h/2]c + x[i]s).
void ApplyRope(float* x, int num_heads, int head_dim, const float* cos, const float* sin);
// Dot product of n floats (lane-wise accumulation, fixed reduction).
float Dot(CpuIsa isa, const float* a, const float* b, int n);
// out[i] += w * v[i].
void Axpy(CpuIsa isa, float w, const float* v, int n, float* out);
// out[i] *= s.
void Scale(float* out, float s, int n);

}  // namespace pdserve::engine::kernels

#endif  // PDSERVE_ENGINE_CPU_KERNELS_H_
