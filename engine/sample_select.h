// Token selection by thresholds instead of sorting: SampleToken's rule (engine/sampling.h:
// top-k, then top-p, then a draw walked in descending probability with ties by id) written so
// that one thread block can run it on a GPU over a whole vocabulary row, without sorting.
//
// A truncation keeps the candidates above a probability value and, at that value, the ties up
// to an id (Kept). The candidate where a running sum in sorted order first crosses a threshold
// (the k-th by count for top-k, the top-p mass, the draw) is found by bisecting the value over
// float bit patterns (non-negative floats order like their bits): about 30 passes of "sum of
// the kept weights above v", then one walk over the ties at the value found, in id order.
// `Row` supplies those two primitives: a plain loop on the host (HostRow, which the tests check
// against SampleToken), block-wide reductions and scans on the device
// (engine/cuda/sampler.cu). Every function here is uniform: all threads of a block call it
// with the same arguments and get the same answer.
// Thread-safety: stateless.
#ifndef PDSERVE_ENGINE_SAMPLE_SELECT_H_
#define PDSERVE_ENGINE_SAMPLE_SELECT_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PDSERVE_HOST_DEVICE __host__ __device__
#else
#define PDSERVE_HOST_DEVICE
#endif

namespace pdserve::engine::select {

PDSERVE_HOST_DEVICE inline uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform double in [0, 1) for (seed, position): the stateless random stream of sampling.h.
PDSERVE_HOST_DEVICE inline double UniformForPosition(uint64_t seed, uint64_t position) {
  const uint64_t z = SplitMix64(SplitMix64(seed) ^ (position * 0xD6E8FEB86659FD93ULL));
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

PDSERVE_HOST_DEVICE inline float FloatFromBits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// The candidates a truncation keeps: every probability above `value`, and those equal to it
// with id <= `last_tie`. The default keeps everything (probabilities are >= 0).
struct Kept {
  float value = -1.0f;
  int32_t last_tie = INT32_MAX;
  PDSERVE_HOST_DEVICE bool Has(float p, int32_t id) const {
    return p > value || (p == value && id <= last_tie);
  }
};

// What a running sum adds per candidate: 1 (top-k counts) or its probability.
enum class Weight { kCount, kMass };

struct Crossing {
  bool found = false;
  float value = 0;  // The crossing candidate's probability,
  int32_t id = -1;  // and its id.
};

// The first kept candidate, in descending probability with ties by ascending id, at which the
// running weight reaches `threshold` (inclusive: >=, else >). Not found when all the kept
// weight does not.
template <typename Row>
PDSERVE_HOST_DEVICE Crossing FirstCrossing(Row& row, Kept kept, Weight weight, double threshold,
                                           bool inclusive) {
  Crossing none;
  const double all = row.SumAbove(-1.0f, kept, weight);
  if (!(inclusive ? all >= threshold : all > threshold)) return none;
  // The smallest v (as bits) whose kept weight strictly above it no longer crosses: the
  // crossing candidate's value. Probabilities are <= 1, so nothing lies above 1.0f.
  int64_t lo = -1;          // Crosses (checked above: v = -1).
  int64_t hi = 0x3f800000;  // 1.0f: nothing above, does not cross for a threshold > 0.
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    const double above = row.SumAbove(FloatFromBits(static_cast<uint32_t>(mid)), kept, weight);
    if (inclusive ? above >= threshold : above > threshold) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  Crossing c;
  c.value = FloatFromBits(static_cast<uint32_t>(hi));
  const double start = row.SumAbove(c.value, kept, weight);
  c.id = row.WalkTies(c.value, kept, weight, start, threshold, inclusive);
  c.found = c.id >= 0;
  return c;
}

struct RowSamplingParams {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  uint64_t seed = 0;
  uint64_t position = 0;
};

// SampleToken's non-greedy choice over the row's probabilities (exp((logit - max) / T),
// summing to `sum`).
template <typename Row>
PDSERVE_HOST_DEVICE int32_t SelectToken(Row& row, const RowSamplingParams& p, double sum) {
  const int32_t n = row.size();
  const double u = UniformForPosition(p.seed, p.position);
  if (p.top_k == 0 && p.top_p >= 1.0f) return row.WalkIds(u * sum);  // Ids in order.
  Kept kept;
  if (p.top_k > 0 && p.top_k < n) {
    const Crossing k = FirstCrossing(row, kept, Weight::kCount, p.top_k, /*inclusive=*/true);
    kept.value = k.value;
    kept.last_tie = k.id;
  }
  if (p.top_p < 1.0f) {
    const double kept_mass = row.SumAbove(-1.0f, kept, Weight::kMass);
    const Crossing top_p =
        FirstCrossing(row, kept, Weight::kMass, p.top_p * kept_mass, /*inclusive=*/true);
    if (top_p.found) {
      kept.value = top_p.value;
      kept.last_tie = top_p.id;
    }
  }
  const double total = row.SumAbove(-1.0f, kept, Weight::kMass);
  const Crossing draw = FirstCrossing(row, kept, Weight::kMass, u * total, /*inclusive=*/false);
  if (draw.found) return draw.id;
  // Rounding put the draw past the last candidate: the last one kept, as SampleToken does.
  const double count = row.SumAbove(-1.0f, kept, Weight::kCount);
  return FirstCrossing(row, kept, Weight::kCount, count, /*inclusive=*/true).id;
}

// The host Row: plain loops over a probability row (the reference the device Row mirrors).
class HostRow {
 public:
  HostRow(const float* probs, int32_t n) : p_(probs), n_(n) {}
  int32_t size() const { return n_; }
  double SumAbove(float value, Kept kept, Weight weight) const {
    double s = 0;
    for (int32_t i = 0; i < n_; ++i) {
      if (p_[i] > value && kept.Has(p_[i], i)) s += weight == Weight::kCount ? 1.0 : p_[i];
    }
    return s;
  }
  int32_t WalkTies(float value, Kept kept, Weight weight, double start, double threshold,
                   bool inclusive) const {
    double acc = start;
    for (int32_t i = 0; i < n_; ++i) {
      if (p_[i] != value || !kept.Has(p_[i], i)) continue;
      acc += weight == Weight::kCount ? 1.0 : p_[i];
      if (inclusive ? acc >= threshold : acc > threshold) return i;
    }
    return -1;
  }
  int32_t WalkIds(double target) const {
    double acc = 0;
    for (int32_t i = 0; i < n_; ++i) {
      acc += p_[i];
      if (acc > target) return i;
    }
    return n_ - 1;
  }

 private:
  const float* p_;
  int32_t n_;
};

}  // namespace pdserve::engine::select

#endif  // PDSERVE_ENGINE_SAMPLE_SELECT_H_
