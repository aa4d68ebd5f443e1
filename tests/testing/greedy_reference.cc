#include "tests/testing/greedy_reference.h"

#include "common/logging.h"
#include "engine/generator.h"
#include "tests/testing/test_models.h"

namespace pdserve::testing {

GreedyReference::GreedyReference(const std::string& variant)
    : GreedyReference(variant, engine::EngineOptions{.num_threads = 1}) {}

GreedyReference::GreedyReference(const std::string& variant, const engine::EngineOptions& options) {
  auto loaded = engine::LoadModel(TestModelDir(variant), options);
  PDS_CHECK(loaded.ok()) << "reference model " << variant << ": " << loaded.status();
  loaded_ = *std::move(loaded);
}

std::vector<int32_t> GreedyReference::Generate(const std::vector<int32_t>& prompt, int max_tokens) {
  text::SamplingConfig sampling;
  sampling.max_tokens = max_tokens;
  sampling.temperature = 0;
  auto out = engine::GenerateSingle(*loaded_.model, loaded_.tokenizer.get(), prompt, sampling,
                                    loaded_.eos_token_ids, engine::GenerateOptions{});
  if (!out.ok()) {
    PDS_LOG(ERROR) << "reference generation: " << out.status();
    return {};
  }
  return out->tokens;
}

std::vector<int32_t> GreedyReference::RandomPrompt(std::mt19937& rng, int length) const {
  std::vector<int32_t> p(length);
  for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab()));
  return p;
}

}  // namespace pdserve::testing
