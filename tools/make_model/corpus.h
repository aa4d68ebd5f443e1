// A seeded synthetic training corpus for pdserve-make-model's tokenizer: Zipf-distributed
// English words and pseudo-words, numbers, punctuation, code, some non-ASCII text and
// whitespace runs, so the learned BPE vocabulary exercises every path of the tokenizer.
// Thread-safety: stateless.
#ifndef PDSERVE_TOOLS_MAKE_MODEL_CORPUS_H_
#define PDSERVE_TOOLS_MAKE_MODEL_CORPUS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace pdserve::tools {

std::string GenerateCorpus(uint64_t seed, size_t approx_bytes);

// A stateless stream of pseudo-random numbers (SplitMix64), identical on every platform
// (std:: distributions are not).
class SeededRandom {
 public:
  explicit SeededRandom(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, n).
  uint64_t Below(uint64_t n) { return Next() % n; }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Standard normal (Box-Muller).
  double Normal();

 private:
  uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0;
};

}  // namespace pdserve::tools

#endif  // PDSERVE_TOOLS_MAKE_MODEL_CORPUS_H_
