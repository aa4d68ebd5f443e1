#include "engine/sampling.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/cpu/kernels.h"
#include "engine/sample_select.h"

namespace pdserve::engine {
namespace {

#if defined(__x86_64__)
// The first index of the maximum (ties go to the lowest id). Vectorised: a max pass, then
// a search for the first lane equal to it.
__attribute__((target("avx512f"))) int32_t Argmax512(const float* x, int n) {
  __m512 best = _mm512_set1_ps(-INFINITY);
  int i = 0;
  for (; i + 16 <= n; i += 16) best = _mm512_max_ps(best, _mm512_loadu_ps(x + i));
  float max = _mm512_reduce_max_ps(best);
  for (int j = i; j < n; ++j) max = std::max(max, x[j]);
  const __m512 target = _mm512_set1_ps(max);
  for (i = 0; i + 16 <= n; i += 16) {
    const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), target, _CMP_EQ_OQ);
    if (eq != 0) return i + __builtin_ctz(eq);
  }
  for (; i < n; ++i) {
    if (x[i] == max) return i;
  }
  return 0;  // All NaN.
}
#endif  // __x86_64__

int32_t Argmax(absl::Span<const float> logits) {
#if defined(__x86_64__)
  static const bool avx512 = CpuSupports(CpuIsa::kAvx512);
  if (avx512) return Argmax512(logits.data(), static_cast<int>(logits.size()));
#endif
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

}  // namespace

double UniformForPosition(uint64_t seed, uint64_t position) {
  return select::UniformForPosition(seed, position);
}

int32_t SampleToken(absl::Span<const float> logits, const text::SamplingConfig& config,
                    uint64_t position, SamplerScratch* scratch) {
  if (config.greedy()) return Argmax(logits);
  const int n = static_cast<int>(logits.size());
  std::vector<float>& probs = scratch->probs;
  probs.resize(n);
  float max = logits[0];
  for (float v : logits) max = std::max(max, v);
  const float inv_t = 1.0f / config.temperature;
  for (int i = 0; i < n; ++i) probs[i] = (logits[i] - max) * inv_t;
  const float sum = kernels::ExpInPlaceSum(BestCpuIsa(), probs.data(), n);
  const double u = UniformForPosition(config.seed, position);

  if (config.top_k == 0 && config.top_p >= 1.0f) {
    // Full distribution: walk ids in order.
    const double target = u * sum;
    double acc = 0;
    for (int i = 0; i < n; ++i) {
      acc += probs[i];
      if (acc > target) return i;
    }
    return n - 1;
  }
  // Candidates by probability (ties: lower id first), truncated by top-k then top-p.
  std::vector<int32_t>& order = scratch->order;
  order.resize(n);
  std::iota(order.begin(), order.end(), 0);
  auto by_prob = [&](int32_t a, int32_t b) {
    return probs[a] != probs[b] ? probs[a] > probs[b] : a < b;
  };
  int keep = n;
  if (config.top_k > 0 && config.top_k < n) {
    keep = config.top_k;
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_prob);
  } else {
    std::sort(order.begin(), order.end(), by_prob);
  }
  if (config.top_p < 1.0f) {
    double kept_mass = 0;
    for (int i = 0; i < keep; ++i) kept_mass += probs[order[i]];
    double acc = 0;
    for (int i = 0; i < keep; ++i) {
      acc += probs[order[i]];
      if (acc >= config.top_p * kept_mass) {
        keep = i + 1;
        break;
      }
    }
  }
  double total = 0;
  for (int i = 0; i < keep; ++i) total += probs[order[i]];
  const double target = u * total;
  double acc = 0;
  for (int i = 0; i < keep; ++i) {
    acc += probs[order[i]];
    if (acc > target) return order[i];
  }
  return order[keep - 1];
}

}  // namespace pdserve::engine
