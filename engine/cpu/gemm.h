// Dense matrix multiply for the CPU backend: Y[M, N] = X[M, K] * W[N, K]^T, with W a weight
// matrix in Hugging Face's [out_features, in_features] layout packed once at load time, kept
// in float32, bfloat16 or float16 (the checkpoint's own type: a decode step is a read of the
// weights, and half the bytes is half the step). Half-precision weights are widened to
// float32 in registers and every product is accumulated in float32, so a half-precision
// matrix gives exactly what the float32 kernel gives on the same (rounded) weights.
//
// Batch invariance: every output element Y[m, n] is computed as one sequential chain of
// fused multiply-adds over k = 0..K-1, whatever M, the row's position in the batch, the tile
// it lands in, the weight type or the thread count. So a sequence's logits do not depend on
// which other sequences share its step (as in vLLM/SGLang's batch-invariant modes), and a
// chunked prefill computes bit-identical KV to a full one. OpenBLAS does not have this
// property at our shapes (its kernel choice depends on M), which is why this kernel exists.
//
// Layout of PackedMatrix: columns of W^T (rows of W) in panels of kPanelWidth:
//   data[panel][k][kPanelWidth], zero-padded past N.
// float32 and float16 panels hold a k-row's 32 columns in order. bfloat16 panels hold them in
// the order that AVX-512 and AVX2 word unpacks widen to columns 0..15 and 16..31 (see
// BfloatSlot in gemm.cc), so widening a row costs two instructions.
// Thread-safety: PackedMatrix is immutable after Pack(); Gemm() may run concurrently.
#ifndef PDSERVE_ENGINE_CPU_GEMM_H_
#define PDSERVE_ENGINE_CPU_GEMM_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "engine/cpu/aligned_buffer.h"
#include "engine/cpu/cpu_isa.h"

namespace pdserve::engine {

class ThreadPool;

// How packed weights are stored.
enum class WeightType : uint8_t { kF32, kBF16, kF16 };
const char* WeightTypeName(WeightType type);  // "f32", "bf16", "f16"
size_t WeightTypeBytes(WeightType type);      // 4 or 2

class PackedMatrix {
 public:
  static constexpr int kPanelWidth = 32;

  PackedMatrix() = default;
  // Packs W (n rows of k floats, row stride ldw), stored as `type` (narrowed with
  // round-to-nearest-even; exact for weights that came from a checkpoint of that type).
  static PackedMatrix Pack(const float* w, int n, int k, int ldw,
                           WeightType type = WeightType::kF32);

  int rows() const { return n_; }  // N (output features)
  int cols() const { return k_; }  // K (input features)
  int panels() const { return panels_; }
  WeightType type() const { return type_; }
  // The packed data: panels() * cols() * kPanelWidth elements of type().
  const void* data() const { return data_.data(); }
  size_t bytes() const { return data_.size(); }
  // W[n][k] as float (tests, and the embedding gather of tied weights).
  float At(int n, int k) const;

 private:
  int n_ = 0;
  int k_ = 0;
  int panels_ = 0;
  WeightType type_ = WeightType::kF32;
  AlignedBuffer<uint8_t> data_;
};

// Y = X * W^T on `isa`'s kernels. X is M rows with stride ldx, Y is M rows with stride ldy
// (>= N). `pool` may be null (single-threaded).
void Gemm(CpuIsa isa, const float* x, int m, int ldx, const PackedMatrix& w, float* y, int ldy,
          ThreadPool* pool);

// The same on the calling thread, with B given directly as float32 panels laid out like
// PackedMatrix's data: [ceil(n / kPanelWidth)][k][kPanelWidth]. Attention uses it with
// transposed keys as B.
void GemmPanels(CpuIsa isa, const float* x, int m, int ldx, const float* panels, int n, int k,
                float* y, int ldy);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_CPU_GEMM_H_
