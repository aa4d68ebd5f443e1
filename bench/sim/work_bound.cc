#include "bench/sim/work_bound.h"

#include <algorithm>
#include <cstdint>
#include <unordered_set>

namespace pdserve::sim {
namespace {

// FNV-1a over a block's tokens, chained from the previous block's hash: equal values mean
// equal prefixes (up to collisions, which only make the bound looser).
uint64_t ChainHash(uint64_t previous, const int32_t* tokens, int count) {
  uint64_t h = previous ^ 0xcbf29ce484222325ULL;
  for (int i = 0; i < count; ++i) {
    h ^= static_cast<uint32_t>(tokens[i]);
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

WorkBound ComputeWorkBound(const std::vector<SimRequest>& requests, const SimProfile& profile,
                           double default_tpot_ms) {
  WorkBound b;
  if (requests.empty()) return b;
  const CostModelParams& t = profile.timing;
  const int block = std::max(1, profile.shape.kv_layout.block_size);
  std::unordered_set<uint64_t> cached_blocks;
  std::vector<double> context(requests.size(), 0);  // Prompt + output, for follow-ups.
  double loosest_tpot = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const SimRequest& r = requests[i];
    const int n = static_cast<int>(r.prompt.size());
    double cached = 0;  // Of the whole prompt, which a follow-up's SimRequest only ends.
    double prompt = n;
    if (r.follow_up_of >= 0 && r.follow_up_of < static_cast<int>(i)) {
      cached = context[r.follow_up_of];  // Its earlier turn, prompt and output, whole.
      prompt += cached;
    } else {
      uint64_t h = 0;
      bool hit = true;
      for (int start = 0; start + block <= n; start += block) {
        h = ChainHash(h, r.prompt.data() + start, block);
        if (hit && cached_blocks.contains(h)) {
          cached += block;
        } else {
          hit = false;
          cached_blocks.insert(h);
        }
      }
    }
    const double u = prompt - cached;
    context[i] = prompt + r.max_tokens;
    const double local =
        t.step_per_prefill_token_ms * u +
        t.step_per_prefill_attention_ms * StepWork::Chunk(u, cached).prefill_attention;
    const double offloaded = t.prefill_overhead_ms + t.prefill_per_token_ms * prompt +
                             t.prefill_per_token_squared_ms * prompt * prompt;
    b.prefill_ms += std::min(local, offloaded);
    // Output tokens 2..max_tokens: one decode each, attending to the prompt and the tokens
    // before it.
    const double decodes = std::max(0, r.max_tokens - 1);
    b.decode_ms += t.step_per_decode_ms * decodes +
                   t.step_per_attention_ms * (decodes * prompt + decodes * (decodes + 1) / 2);
    loosest_tpot = std::max(loosest_tpot, r.slo.has_value() ? r.slo->tpot_ms : default_tpot_ms);
  }
  const double count = static_cast<double>(requests.size());
  b.prefill_ms /= count;
  b.decode_ms /= count;
  b.intercept_share = loosest_tpot > 0 ? t.step_intercept_ms / loosest_tpot : 1;
  if (b.intercept_share >= 1) return b;
  const double worker_ms = b.prefill_ms + b.decode_ms / (1 - b.intercept_share);
  if (worker_ms > 0) b.per_gpu = 1e3 / worker_ms / std::max(1, profile.shape.gpus_per_worker);
  return b;
}

}  // namespace pdserve::sim
