// The reference every serving test compares with: greedy tokens a sequence gets alone, from
// the engine in the test's own process, on a test model variant.
// Thread-safety: Generate is not thread-safe (one model, one forward at a time).
#ifndef PDSERVE_TESTS_TESTING_GREEDY_REFERENCE_H_
#define PDSERVE_TESTS_TESTING_GREEDY_REFERENCE_H_

#include <random>
#include <string>
#include <vector>

#include "engine/model_loader.h"

namespace pdserve::testing {

class GreedyReference {
 public:
  // Loads the variant (see test_models.h) on the CPU backend, one thread, or with `options`
  // (another backend: the emulated one's tokens); aborts the test binary if it cannot.
  explicit GreedyReference(const std::string& variant = "tiny");
  GreedyReference(const std::string& variant, const engine::EngineOptions& options);
  // Greedy generation of at most `max_tokens` after `prompt`; empty on an engine error.
  std::vector<int32_t> Generate(const std::vector<int32_t>& prompt, int max_tokens);
  int vocab() const { return loaded_.model->config().vocab_size; }
  // `length` uniformly random token ids.
  std::vector<int32_t> RandomPrompt(std::mt19937& rng, int length) const;

 private:
  engine::LoadedModel loaded_;
};

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_TESTING_GREEDY_REFERENCE_H_
