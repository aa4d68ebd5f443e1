// Places one validated request: picks its decode worker (one with free KV blocks for the
// request's uncached prompt first; then the longest cached prefix from the prefix index, then
// load (PlacerConfig::decode_balance: its request count, or the decode step time they
// predict), then free KV; workers over their queue limit are skipped), then
// asks the placement policy whether its prefill runs there or on a prefill worker (with
// alternates), records the decision (metrics, decision log, structured log line) and counts
// the request against the chosen workers until their next load report.
// Thread-safety: Place() is safe from any thread.
#ifndef PDSERVE_ROUTER_PLACER_H_
#define PDSERVE_ROUTER_PLACER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "router/decision_log.h"
#include "router/model_catalog.h"
#include "router/placement/placement_policy.h"
#include "router/placement_decision.h"
#include "router/placement_inputs.h"
#include "router/router_metrics.h"
#include "router/worker_registry.h"

namespace pdserve::router {

// What a decode worker's load is when the placer compares them.
// The default is kStreams: in pdserve-sim (Mooncake, 8 GPUs, cost_model 3P:5D) kWork lowers
// TPOT p90 by 8-11 % below the knee but leaves goodput where it was (-1 %, one grid step) and
// degrades sooner past it: the workers it picks hold more short streams, so the policy
// offloads more, the prefill workers fill and offloads fall back to local prefills (attainment
// 0.40 against 0.71 at 1.05x the knee). bench/README.md `sim` has the figures.
enum class DecodeBalance {
  kStreams,  // The number of its requests.
  kWork,     // The decode step time its requests predict (count and attended KV positions).
};
// "work" or "streams"; INVALID_ARGUMENT naming `flag` otherwise.
absl::StatusOr<DecodeBalance> ParseDecodeBalance(absl::string_view text, absl::string_view flag);

struct PlacerConfig {
  // A decode worker with this many requests waiting (reported plus dispatched since) takes
  // no more; when every candidate is that full the request gets RESOURCE_EXHAUSTED.
  // Default 256.
  int max_waiting_per_worker = 256;
  // The retry-after hint given with RESOURCE_EXHAUSTED. Default 200 ms.
  absl::Duration retry_after = absl::Milliseconds(200);
  // Prefix affinity yields to load when the candidates are this unbalanced: the busiest's
  // load (as decode_balance measures it) is more than balance_abs requests' worth (the
  // candidates' mean per request; with counts, requests) over the idlest's and more than
  // balance_rel times it (SGLang's cache-aware router does the same). Without it every
  // request sharing one system-prompt block lands on one worker: pdserve-sim on the Mooncake
  // trace sent 95 % of requests to one of six workers. Defaults 8 and 1.5.
  int balance_abs = 8;
  double balance_rel = 1.5;
  DecodeBalance decode_balance = DecodeBalance::kStreams;
};

// How many times one request may be handed back by decode workers draining for a role switch
// (before its first token) and placed again; once more and it fails UNAVAILABLE. A request
// goes back only from a worker that is leaving the decode role, so more than one is rare.
inline constexpr int kMaxHandBacks = 3;

struct PlacementRequest {
  std::string request_id;
  const CatalogModel* model = nullptr;
  const std::vector<int32_t>* prompt = nullptr;
  int max_tokens = 0;
  // Decode workers not to use (a retry after one failed, or handed the request back, before
  // its first token).
  std::vector<std::string> exclude;
  // The request's objectives (resolved by the router's SloCatalog); unset: the policy's.
  std::optional<SloConfig> slo;
};

struct PlacementResult {
  Placement placement;          // The router's decision.
  uint64_t decode_session = 0;  // For WorkerRegistry::Acquire.
  double decision_us = 0;
  double predicted_ttft_ms = 0;  // Of the chosen mode.
  uint64_t fingerprint = 0;
  double last_layer_bytes = 0;  // Of a transfer of the uncached suffix (predicted).
  int num_layers = 1;           // Of the model's KV (measured bytes -> one layer's).
};

class Placer {
 public:
  Placer(WorkerRegistry* registry, const CostModel* cost_model, const PlacementPolicy* policy,
         const PlacerConfig& config, RouterMetrics* metrics, DecisionLog* log);

  // UNAVAILABLE when no decode worker serves the model or can hold the request,
  // RESOURCE_EXHAUSTED (with a retry-after hint) when all that could are full.
  absl::StatusOr<PlacementResult> Place(const PlacementRequest& request);

  const PlacementPolicy& policy() const { return *policy_; }

 private:
  // The decode candidates as the choice compares them: fit, cached prefix (from the prefix
  // index), load (PlacerConfig::decode_balance). Under the registry's lock.
  std::vector<CandidateView> ViewCandidates(absl::Span<WorkerEntry* const> decode,
                                            const PrefixIndex& prefix,
                                            absl::Span<const int32_t> prompt) const;

  WorkerRegistry* registry_;
  const CostModel* cost_model_;
  const PlacementPolicy* policy_;
  const PlacerConfig config_;
  RouterMetrics* metrics_;
  DecisionLog* log_;
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_PLACER_H_
