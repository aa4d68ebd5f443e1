#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "absl/strings/str_cat.h"
#include "engine/cuda/sampler.h"

namespace pdserve::engine::cuda {
namespace {

constexpr int kSampleThreads = 1024;

using DoubleReduce = cub::BlockReduce<double, kSampleThreads>;
using FloatReduce = cub::BlockReduce<float, kSampleThreads>;
using IntReduce = cub::BlockReduce<int32_t, kSampleThreads>;
using DoubleScan = cub::BlockScan<double, kSampleThreads>;

struct MinOp {
  __device__ int32_t operator()(int32_t a, int32_t b) const { return a < b ? a : b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Thread 0's `v`, to every thread of the block (through `slot` in shared memory).
template <typename T>
__device__ T FromThreadZero(T v, T* slot) {
  if (threadIdx.x == 0) *slot = v;
  __syncthreads();
  v = *slot;
  __syncthreads();
  return v;
}

union SampleStorage {
  typename DoubleReduce::TempStorage doubles;
  typename FloatReduce::TempStorage floats;
  typename IntReduce::TempStorage ints;
  typename DoubleScan::TempStorage scan;
};

// sample_select.h's Row over one block: every call is a block-wide collective, called by all
// threads with the same arguments, returning the same value to all.
class BlockRow {
 public:
  __device__ BlockRow(const float* probs, int32_t n, SampleStorage* storage, double* d_slot,
                      int32_t* i_slot)
      : p_(probs), n_(n), storage_(storage), d_slot_(d_slot), i_slot_(i_slot) {}

  __device__ int32_t size() const { return n_; }

  __device__ double SumAbove(float value, select::Kept kept, select::Weight weight) {
    double s = 0;
    for (int32_t i = threadIdx.x; i < n_; i += blockDim.x) {
      const float x = p_[i];
      if (x > value && kept.Has(x, i)) s += weight == select::Weight::kCount ? 1.0 : x;
    }
    return BroadcastDouble(DoubleReduce(storage_->doubles).Sum(s));
  }

  __device__ int32_t WalkTies(float value, select::Kept kept, select::Weight weight, double start,
                              double threshold, bool inclusive) {
    return Walk(start, threshold, inclusive, [&](int32_t i, float x) -> double {
      if (x != value || !kept.Has(x, i)) return -1;  // Not a candidate.
      return weight == select::Weight::kCount ? 1.0 : x;
    });
  }

  __device__ int32_t WalkIds(double target) {
    const int32_t id =
        Walk(0, target, /*inclusive=*/false, [](int32_t, float x) -> double { return x; });
    return id >= 0 ? id : n_ - 1;
  }

  // The maximum of `values` (a row of n floats).
  __device__ float Max(const float* values) {
    float best = -INFINITY;
    for (int32_t i = threadIdx.x; i < n_; i += blockDim.x) best = fmaxf(best, values[i]);
    // A float widens to double exactly.
    return static_cast<float>(BroadcastDouble(FloatReduce(storage_->floats).Reduce(best, MaxOp())));
  }

  // The first id of the maximum of `values` (the row's logits).
  __device__ int32_t Argmax(const float* values) {
    const float best = Max(values);
    int32_t first = INT32_MAX;
    for (int32_t i = threadIdx.x; i < n_ && first == INT32_MAX; i += blockDim.x) {
      if (values[i] == best) first = i;
    }
    const int32_t id = BroadcastInt(IntReduce(storage_->ints).Reduce(first, MinOp()));
    return id == INT32_MAX ? 0 : id;  // All NaN: id 0, as the CPU sampler.
  }

 private:
  // Walks ids in order, chunk by chunk: weight(i, p) < 0 skips a non-candidate. Returns the
  // first candidate whose running weight from `start` crosses `threshold`, or -1.
  template <typename WeightOf>
  __device__ int32_t Walk(double start, double threshold, bool inclusive, WeightOf weight_of) {
    for (int32_t base = 0; base < n_; base += blockDim.x) {
      const int32_t i = base + threadIdx.x;
      double w = i < n_ ? weight_of(i, p_[i]) : -1;
      const bool candidate = w >= 0;
      double running = 0, chunk = 0;
      DoubleScan(storage_->scan).InclusiveSum(candidate ? w : 0.0, running, chunk);
      __syncthreads();
      const double acc = start + running;
      const bool hit = candidate && (inclusive ? acc >= threshold : acc > threshold);
      const int32_t first =
          BroadcastInt(IntReduce(storage_->ints).Reduce(hit ? i : INT32_MAX, MinOp()));
      if (first != INT32_MAX) return first;
      start += chunk;
    }
    return -1;
  }

  __device__ double BroadcastDouble(double v) { return FromThreadZero(v, d_slot_); }
  __device__ int32_t BroadcastInt(int32_t v) { return FromThreadZero(v, i_slot_); }

  const float* p_;
  int32_t n_;
  SampleStorage* storage_;
  double* d_slot_;
  int32_t* i_slot_;
};

__global__ void __launch_bounds__(kSampleThreads)
    SampleKernel(const float* logits, int vocab, const DeviceRowSampling* rows, float* probs,
                 int32_t* out) {
  __shared__ SampleStorage storage;
  __shared__ double d_slot;
  __shared__ int32_t i_slot;
  const int r = blockIdx.x;
  const float* l = logits + static_cast<int64_t>(r) * vocab;
  float* p = probs + static_cast<int64_t>(r) * vocab;
  BlockRow row(p, vocab, &storage, &d_slot, &i_slot);
  const DeviceRowSampling s = rows[r];
  if (s.greedy) {
    const int32_t id = row.Argmax(l);
    if (threadIdx.x == 0) out[r] = id;
    return;
  }
  // SampleToken's probabilities: exp((logit - max) / T), unnormalised.
  const float max = row.Max(l);
  const float inv_t = 1.0f / s.params.temperature;
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) p[i] = expf((l[i] - max) * inv_t);
  __syncthreads();  // Block-wide visibility of the probabilities (global memory).
  const double sum = row.SumAbove(-1.0f, select::Kept{}, select::Weight::kMass);
  const int32_t id = select::SelectToken(row, s.params, sum);
  if (threadIdx.x == 0) out[r] = id;
}

}  // namespace

absl::Status SampleRowsOnDevice(const float* logits, int rows, int vocab,
                                const DeviceRowSampling* params, float* probs, int32_t* out,
                                cudaStream_t stream) {
  if (rows <= 0) return absl::OkStatus();
  SampleKernel<<<rows, kSampleThreads, 0, stream>>>(logits, vocab, params, probs, out);
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cuda SampleRows: ", cudaGetErrorString(err)));
}

}  // namespace pdserve::engine::cuda
