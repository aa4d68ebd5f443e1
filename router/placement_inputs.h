// The placer's pure steps, apart from the registry's lock and its bookkeeping: which decode
// workers a request may go to, which one it goes to, which prefill workers could take its
// prefill, and what the placement policy is told. Each takes values and returns values, so
// tests state workers as a table and the placer (placer.h) only sequences them under the lock.
// Thread-safety: functions are reentrant; the caller holds whatever guards the entries.
#ifndef PDSERVE_ROUTER_PLACEMENT_INPUTS_H_
#define PDSERVE_ROUTER_PLACEMENT_INPUTS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "router/placement/placement_policy.h"
#include "router/worker_registry.h"

namespace pdserve::router {

// What a request asks of its decode worker.
struct DecodeDemand {
  std::string model;
  int prompt_tokens = 0;
  int max_tokens = 0;
  std::vector<std::string> exclude;  // Worker ids not to use.
  // A worker with this many requests waiting (reported plus dispatched since) takes no more.
  int max_waiting_per_worker = 256;
  absl::Duration retry_after = absl::Milliseconds(200);  // With RESOURCE_EXHAUSTED.
};

// The decode workers `demand` may go to, in `workers`' order. Errors say why none may:
// UNAVAILABLE when none serves the model or none that could hold it takes work now,
// INVALID_ARGUMENT when the request is bigger than any of them holds (no retry helps),
// RESOURCE_EXHAUSTED (with a retry-after hint) when all that could are full.
absl::StatusOr<std::vector<WorkerEntry*>> DecodeCandidates(absl::Span<WorkerEntry* const> workers,
                                                           const DecodeDemand& demand);

// One decode candidate as the choice compares them.
struct CandidateView {
  bool fits = false;  // Its free blocks hold the uncached prompt and a token.
  int cached_tokens = 0;
  double work = 0;   // Its load as PlacerConfig::decode_balance measures it.
  int requests = 0;  // Its request count (DecodeLoad).
  int64_t free_blocks = 0;
};

// Whether the longest cached prefix may lead the choice: the candidates' loads are not
// unbalanced past both bounds (the spread in requests of their mean work each over
// `balance_abs`, the busiest over `balance_rel` times the idlest). PlacerConfig says why.
bool AffinityMayLead(absl::Span<const CandidateView> candidates, int balance_abs,
                     double balance_rel);

// The candidate a request goes to (its index): one that fits first; then, when
// `affinity_leads`, the longest cached prefix; then the least work, the fewest requests, the
// longest cached prefix, the most free blocks; ties to the lowest index. Non-empty input.
size_t ChooseDecode(absl::Span<const CandidateView> candidates, bool affinity_leads);

// The prefill workers that can write KV into `decode`'s pool: taking work, of the same
// model fingerprint and KV geometry (KvLayout::SameGeometry, the check the transport makes).
std::vector<WorkerEntry*> PrefillCandidatesFor(absl::Span<WorkerEntry* const> workers,
                                               const WorkerInfo& decode);

// What the placement policy is told of a request going to `decode` with `cached_tokens` of
// its `prompt_tokens` cached there, and of the `prefill` workers (candidate i is prefill[i]);
// rates are taken at `now`. The prefill candidates point at their workers' arrival mixes: the
// inputs are used under the registry's lock that the entries were read under.
PlacementInputs BuildPlacementInputs(const WorkerEntry& decode, int prompt_tokens,
                                     int cached_tokens, absl::Span<WorkerEntry* const> prefill,
                                     absl::Time now, const std::optional<SloConfig>& slo);

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_PLACEMENT_INPUTS_H_
