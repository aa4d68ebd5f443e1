// Requests per second arriving at one worker, in all and by prompt length: exponentially
// decaying counts with one time constant, updated at each arrival. The cost model reads the
// total as "who arrives while a prefill holds the worker", and the rate per length class as
// "how much local prefill work the worker would take if prompts up to this long stayed there"
// (a long prompt's TPOT harm; see EstimateCosts).
// Thread-safety: none (the registry's lock guards its entries).
#ifndef PDSERVE_ROUTER_ARRIVAL_MIX_H_
#define PDSERVE_ROUTER_ARRIVAL_MIX_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"

namespace pdserve::router {

// Arrivals of one prompt-length class: lengths in [min_tokens, 2^(1/4) * min_tokens).
struct LengthClassRate {
  double min_tokens = 0;
  double mean_tokens = 0;  // Of the arrivals counted, weighted as the rate.
  double per_s = 0;
};

class ArrivalMix {
 public:
  // Four classes per octave of prompt length, 1 token to 2^22.
  static constexpr int kClassesPerOctave = 4;
  static constexpr int kClasses = 22 * kClassesPerOctave + 1;

  explicit ArrivalMix(absl::Duration window);

  // One arrival at `now` (not before the last one) of a prompt of `tokens` (uncached).
  void Count(absl::Time now, int tokens);
  // Arrivals per second, all lengths.
  double Rate(absl::Time now) const;
  // The classes with arrivals, shortest first.
  std::vector<LengthClassRate> Classes(absl::Time now) const;
  // Both at once (one decay factor): what a placement reads for every candidate.
  struct Snapshot {
    double per_s = 0;
    std::vector<LengthClassRate> classes;
  };
  Snapshot Read(absl::Time now) const;

  static int ClassOf(int tokens);
  static double ClassMinTokens(int length_class);

 private:
  double Decay(absl::Time now) const;
  double RateWith(double decay) const;
  std::vector<LengthClassRate> ClassesWith(double decay) const;
  // Calls f(c) for every class ever counted, in increasing order. The others hold zeros, so
  // skipping them changes no sum (a placement reads a few classes of 89 per candidate).
  template <typename F>
  void ForEachCounted(F f) const;

  double window_s_;
  absl::Time last_;                                       // InfinitePast until the first arrival.
  std::array<double, kClasses> count_{};                  // Decayed arrivals per class, / window.
  std::array<double, kClasses> tokens_{};                 // Their decayed token sums, / window.
  std::array<uint64_t, (kClasses + 63) / 64> counted_{};  // Bit c: class c was ever counted.
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_ARRIVAL_MIX_H_
