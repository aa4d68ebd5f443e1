#include "router/arrival_mix.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

namespace pdserve::router {

ArrivalMix::ArrivalMix(absl::Duration window)
    : window_s_(absl::ToDoubleSeconds(window)), last_(absl::InfinitePast()) {}

int ArrivalMix::ClassOf(int tokens) {
  if (tokens <= 1) return 0;
  const int c = static_cast<int>(std::floor(std::log2(tokens) * kClassesPerOctave));
  return std::clamp(c, 0, kClasses - 1);
}

double ArrivalMix::ClassMinTokens(int length_class) {
  // Computed once: a decision lists every prefill candidate's classes, and exp2 per class was
  // a tenth of a decision among 64 prefill workers. Immutable after its first use.
  static const std::array<double, kClasses> kMinTokens = [] {
    std::array<double, kClasses> t{};
    for (int c = 0; c < kClasses; ++c) t[c] = std::exp2(static_cast<double>(c) / kClassesPerOctave);
    return t;
  }();
  if (length_class >= 0 && length_class < kClasses) return kMinTokens[length_class];
  return std::exp2(static_cast<double>(length_class) / kClassesPerOctave);
}

double ArrivalMix::Decay(absl::Time now) const {
  if (last_ == absl::InfinitePast()) return 0;
  return std::exp(-std::max(0.0, absl::ToDoubleSeconds(now - last_)) / window_s_);
}

template <typename F>
void ArrivalMix::ForEachCounted(F f) const {
  for (size_t word = 0; word < counted_.size(); ++word) {
    for (uint64_t bits = counted_[word]; bits != 0; bits &= bits - 1)
      f(static_cast<int>(word * 64 + std::countr_zero(bits)));
  }
}

void ArrivalMix::Count(absl::Time now, int tokens) {
  const double decay = Decay(now);
  if (decay != 1) {
    ForEachCounted([&](int c) {
      count_[c] *= decay;
      tokens_[c] *= decay;
    });
  }
  const int c = ClassOf(tokens);
  counted_[c / 64] |= uint64_t{1} << (c % 64);
  count_[c] += 1 / window_s_;
  tokens_[c] += std::max(0, tokens) / window_s_;
  last_ = std::max(last_, now);
}

double ArrivalMix::RateWith(double decay) const {
  double sum = 0;
  ForEachCounted([&](int c) { sum += count_[c]; });
  return sum * decay;
}

std::vector<LengthClassRate> ArrivalMix::ClassesWith(double decay) const {
  std::vector<LengthClassRate> classes;
  ForEachCounted([&](int c) {
    const double per_s = count_[c] * decay;
    // Under one arrival in a thousand windows: gone.
    if (per_s * window_s_ < 1e-3) return;
    classes.push_back(
        {.min_tokens = ClassMinTokens(c), .mean_tokens = tokens_[c] / count_[c], .per_s = per_s});
  });
  return classes;
}

double ArrivalMix::Rate(absl::Time now) const { return RateWith(Decay(now)); }

std::vector<LengthClassRate> ArrivalMix::Classes(absl::Time now) const {
  return ClassesWith(Decay(now));
}

ArrivalMix::Snapshot ArrivalMix::Read(absl::Time now) const {
  const double decay = Decay(now);
  return {.per_s = RateWith(decay), .classes = ClassesWith(decay)};
}

}  // namespace pdserve::router
