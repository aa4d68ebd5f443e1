// Token sampling: greedy, temperature, top-k, top-p, seeded.
// The random draw for a token depends only on the request's seed and the token's absolute
// position, so a first token sampled on a prefill worker and the rest sampled on a decode
// worker give the same stream as one process would.
// Thread-safety: SampleToken is reentrant given its own scratch.
#ifndef PDSERVE_ENGINE_SAMPLING_H_
#define PDSERVE_ENGINE_SAMPLING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "text/sampling_config.h"

namespace pdserve::engine {

struct SamplerScratch {
  std::vector<float> probs;
  std::vector<int32_t> order;
};

// Uniform double in [0, 1) for (seed, position): the stateless random stream.
double UniformForPosition(uint64_t seed, uint64_t position);

// Picks the next token from one row of logits. `position` is the absolute position the
// sampled token will occupy. Greedy ties go to the lowest id.
int32_t SampleToken(absl::Span<const float> logits, const text::SamplingConfig& config,
                    uint64_t position, SamplerScratch* scratch);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_SAMPLING_H_
