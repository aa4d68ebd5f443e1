#include "sim/work_bound.h"

#include <algorithm>
#include <cstdint>
#include <map>
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
  // Per phase: requests, prefill and decode work, first and last arrival. The prefix cache
  // spans the phases (a bound may not forget what an earlier phase cached).
  struct Phase {
    double count = 0, prefill_ms = 0, decode_ms = 0;
    double first_s = 1e300, last_s = -1e300;
  };
  std::map<int, Phase> phases;
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
    // Output tokens 2..max_tokens: one decode each, attending to the prompt and the tokens
    // before it.
    const double decodes = std::max(0, r.max_tokens - 1);
    Phase& p = phases[r.phase];
    p.count += 1;
    p.prefill_ms += std::min(local, offloaded);
    p.decode_ms += t.step_per_decode_ms * decodes +
                   t.step_per_attention_ms * (decodes * prompt + decodes * (decodes + 1) / 2);
    if (r.follow_up_of < 0) {  // A follow-up is sent when its turn ends, not at arrival_s.
      p.first_s = std::min(p.first_s, r.arrival_s);
      p.last_s = std::max(p.last_s, r.arrival_s);
    }
    loosest_tpot = std::max(loosest_tpot, r.slo.has_value() ? r.slo->tpot_ms : default_tpot_ms);
  }
  const double count = static_cast<double>(requests.size());
  for (const auto& [id, p] : phases) {
    b.prefill_ms += p.prefill_ms / count;
    b.decode_ms += p.decode_ms / count;
  }
  b.intercept_share = loosest_tpot > 0 ? t.step_intercept_ms / loosest_tpot : 1;
  if (b.intercept_share >= 1) return b;
  const double gpus_per_worker = std::max(1, profile.shape.gpus_per_worker);
  // What the work of `prefill_ms` and `decode_ms` per request allows per GPU.
  auto per_gpu = [&](double prefill_ms, double decode_ms) {
    const double worker_ms = prefill_ms + decode_ms / (1 - b.intercept_share);
    return worker_ms > 0 ? 1e3 / worker_ms / gpus_per_worker : 0.0;
  };
  b.per_gpu = per_gpu(b.prefill_ms, b.decode_ms);
  if (phases.size() < 2) return b;
  // A timeline: each phase's own bound, over its share of the whole timeline's rate.
  double first = 1e300, last = -1e300;
  for (const auto& [id, p] : phases) {
    first = std::min(first, p.first_s);
    last = std::max(last, p.last_s);
  }
  const double mean_rate = (count - 1) / std::max(1e-9, last - first);
  for (const auto& [id, p] : phases) {
    if (p.count < 2 || p.last_s <= p.first_s) continue;
    const double rate = (p.count - 1) / (p.last_s - p.first_s);
    b.per_gpu = std::min(b.per_gpu,
                         per_gpu(p.prefill_ms / p.count, p.decode_ms / p.count) * mean_rate / rate);
  }
  return b;
}

}  // namespace pdserve::sim
