// Dense matrix multiply for the CPU backend: Y[M, N] = X[M, K] * W[N, K]^T, with W a weight
// matrix in Hugging Face's [out_features, in_features] layout packed once at load time.
//
// Batch invariance: every output element Y[m, n] is computed as one sequential chain of
// fused multiply-adds over k = 0..K-1, whatever M, the row's position in the batch, the tile
// it lands in, or the thread count. So a sequence's logits do not depend on which other
// sequences share its step (as in vLLM/SGLang's batch-invariant modes), and a chunked
// prefill computes bit-identical KV to a full one. OpenBLAS does not have this property at
// our shapes (its kernel choice depends on M), which is why this kernel exists.
//
// Layout of PackedMatrix: columns of W^T (rows of W) in panels of kPanelWidth:
//   data[panel][k][kPanelWidth], zero-padded past N.
// Thread-safety: PackedMatrix is immutable after Pack(); Gemm() may run concurrently.
#ifndef PDSERVE_ENGINE_CPU_GEMM_H_
#define PDSERVE_ENGINE_CPU_GEMM_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "engine/cpu/aligned_buffer.h"

namespace pdserve::engine {

class ThreadPool;

class PackedMatrix {
 public:
  static constexpr int kPanelWidth = 32;

  PackedMatrix() = default;
  // Packs W (n rows of k floats, row stride ldw).
  static PackedMatrix Pack(const float* w, int n, int k, int ldw);

  int rows() const { return n_; }  // N (output features)
  int cols() const { return k_; }  // K (input features)
  int panels() const { return panels_; }
  const float* panel(int p) const {
    return data_.data() + static_cast<size_t>(p) * k_ * kPanelWidth;
  }
  size_t bytes() const { return data_.size() * sizeof(float); }

 private:
  int n_ = 0;
  int k_ = 0;
  int panels_ = 0;
  AlignedBuffer<float> data_;
};

// Y = X * W^T. X is M rows with stride ldx, Y is M rows with stride ldy (>= N).
// `pool` may be null (single-threaded).
void Gemm(const float* x, int m, int ldx, const PackedMatrix& w, float* y, int ldy,
          ThreadPool* pool);

// The same on the calling thread, with B given directly as panels laid out like
// PackedMatrix's data: [ceil(n / kPanelWidth)][k][kPanelWidth]. Attention uses it with
// transposed keys as B.
void GemmPanels(const float* x, int m, int ldx, const float* panels, int n, int k, float* y,
                int ldy);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_CPU_GEMM_H_
