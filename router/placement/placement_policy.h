// How a request's prefill is placed once its decode worker is chosen: LOCAL (chunked on the
// decode worker, co-batched with its running decodes) or OFFLOAD (on a prefill worker, KV
// streamed into the decode worker). One policy per file, chosen once by name:
//   cost_model        offload iff the predicted interference exceeds the offload's cost
//                     (docs/architecture.md), within the TTFT/TPOT SLOs. The default.
//   always_local      never offload (a monolithic engine with chunked prefill).
//   always_offload    offload whenever a prefill worker exists (plain PD disaggregation).
//   length_threshold  offload when the uncached prompt is at least N tokens (the static rule
//                     shipped systems use).
// Every policy reports the cost model's predictions so that decisions can be compared.
// Thread-safety: policies are immutable after construction; Decide() is reentrant.
#ifndef PDSERVE_ROUTER_PLACEMENT_PLACEMENT_POLICY_H_
#define PDSERVE_ROUTER_PLACEMENT_PLACEMENT_POLICY_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "router/arrival_mix.h"
#include "router/cost_model.h"
#include "router/stream_lengths.h"

namespace pdserve::router {

// The chosen decode worker, as the cost model needs it.
struct DecodeCandidate {
  int running = 0;  // Running decodes (D), including the router's unreported ones.
  int64_t pending_prefill_tokens = 0;        // Its local chunked-prefill backlog.
  double pending_prefill_token_squares = 0;  // Its attention work (LoadSnapshot's); 0: unknown.
  int step_token_budget = 512;  // max_num_batched_tokens: decodes first, the rest prefill.
  double attention_per_decode = 0;
  // Its recent steps with decodes as they took (ms; 0: none measured): its streams' TPOT now.
  double measured_step_ms = 0;
  uint64_t fingerprint = 0;
  int64_t kv_bytes_per_token = 0;  // All layers, K and V.
  int num_layers = 1;
  double arrivals_per_s = 0;  // Recent request rate to this worker.
  // The same by uncached prompt length, shortest first (empty: unknown; the cost model then
  // takes every arrival to be as long as the prompt it places).
  std::vector<LengthClassRate> arrival_classes;
  // Of the running streams this router relays there, how many carry a TPOT objective and
  // the tightest of them; the others (another router's) are held to the default.
  int streams_with_objective = 0;
  double tightest_tpot_ms = 0;
  // The running streams this router relays there by the tokens they may generate
  // (max_tokens in [2^b, 2^(b+1)); the last bucket holds the rest) and their objectives: a
  // short stream's TPOT is the mean of a few steps, so a local prefill's mixed steps weigh on
  // it whole. Streams not counted here (unknown lengths, another router's) are taken as long.
  StreamLengths short_streams;
};

// A prefill worker that could take the request (same model and KV layout).
struct PrefillCandidate {
  int index = 0;  // Caller's index, returned in the decision.
  int64_t pending_tokens = 0;
  double tokens_per_second = 0;      // Reported; 0 before its first prefill.
  double arrivals_per_s = 0;         // Recent offloads this router sent it.
  double pending_token_squares = 0;  // The queue's attention work (LoadSnapshot's); 0: unknown.
  // Those offloads by prompt length class, ascending (empty: unknown; then priced as this one).
  std::vector<LengthClassRate> arrival_classes;
  // Where the two above are read from instead, at `arrivals_at`, when set: only the candidate
  // an offload would go to is priced by its arrivals, so the router hands its workers' mixes
  // (read under its registry's lock, while they cannot change) rather than copying every
  // candidate's. Must outlive the policy's Decide.
  const ArrivalMix* arrival_mix = nullptr;
  absl::Time arrivals_at;
};

struct SloConfig {
  // Time to first token the router aims for; offloading that would miss it while local would
  // not is refused. Default 2 s.
  double ttft_ms = 2000;
  // Time per output token of a stream; a local prefill whose mixed steps exceed the tightest
  // objective among the streams beside it is offloaded if possible. Default 200 ms.
  double tpot_ms = 200;
};

struct PlacementInputs {
  int prompt_tokens = 0;
  int cached_tokens = 0;  // Prefix-cache hit on the decode worker.
  int uncached_tokens() const { return prompt_tokens - cached_tokens; }
  DecodeCandidate decode;
  std::vector<PrefillCandidate> prefill;
  // The request's own objectives (GenerateRequest.objectives, resolved by the router);
  // unset: the policy's configured default.
  std::optional<SloConfig> slo;
};

// One prefill worker's predicted offload.
struct PrefillEstimate {
  int index = 0;  // The candidate's index.
  double queue_ms = 0;
  double ttft_ms = 0;
  // Delay summed over the offloads expected to queue behind it there: the queue is FIFO, so
  // those arriving while it waits wait for its whole compute, those arriving while it
  // computes half of it on average (the offload's counterpart of interference_ms). Priced
  // for the first estimate only, the worker an offload goes to; 0 in the others.
  double queueing_interference_ms = 0;
};

// The cost model's view of one request, computed once and shared by every policy.
struct CostEstimate {
  // Delay summed over the streams a local prefill holds up: the running decodes for its
  // whole duration, plus the requests expected to arrive while it runs (each waits half of
  // it on average).
  double interference_ms = 0;
  // Requests expected to arrive at the decode worker while a local prefill runs.
  double expected_arrivals = 0;
  double ttft_local_ms = 0;
  // Mean TPOT of the streams beside it if prefills like it keep arriving locally at the
  // worker's rate (vs the TPOT SLO).
  double tpot_local_ms = 0;
  // What its mixed steps add to the mean TPOT of the short streams beside it (averaged over
  // all the streams beside it): of those without an objective, in ms (the default objective
  // judges it), and of those with one, as a share of each one's objective.
  double short_streams_delay_ms = 0;
  double short_streams_delay_share = 0;
  double mixed_step_ms = 0;    // Step time while its chunks run.
  double ttft_offload_ms = 0;  // Best prefill worker.
  // Transfer tail + extra TTFT over local + the delay it adds to the offloads queueing behind
  // it (queueing_interference_ms).
  double offload_cost_ms = 0;
  double transfer_tail_ms = 0;
  double prefill_compute_ms = 0;         // The whole prompt on a prefill worker, queue aside.
  std::vector<PrefillEstimate> prefill;  // Best predicted TTFT first.
};
CostEstimate EstimateCosts(const PlacementInputs& inputs, const CostModel& model);

struct PlacementDecision {
  bool offload = false;
  std::string reason;
  std::vector<int> prefill;  // OFFLOAD: caller's indices, primary first, then alternates.
  CostEstimate estimate;
};

struct PolicyConfig {
  // cost_model, always_local, always_offload or length_threshold. Default cost_model.
  std::string name = "cost_model";
  // Below this many uncached tokens a prefill stays local (short_prompt / warm_prefix) under
  // cost_model. Default 256.
  int min_offload_tokens = 256;
  // cost_model: prompts with at least this many uncached tokens are offloaded, however
  // short, when prompts like them would push running streams past --tpot_headroom of the
  // TPOT objective.
  // Default 32.
  int min_tpot_offload_tokens = 32;
  // cost_model: local prefills may stretch the mean TPOT of the streams beside them up to
  // this fraction of their objective. Under 1 it trades goodput for a margin against load
  // the router's arrival rates have not seen yet (they decay over 10 s). Judged at steady
  // state, the objective itself is best (pdserve-sim, Azure trace at 8 GPUs: goodput 24.2
  // requests/s per GPU at 1, 23.9 at 0.9, 23.7 at 0.8, 23.2 at 0.7; Mooncake the same at 0.7
  // and 1; bench/README.md). 0.7 was chosen on bursts, where the rates lag (steady_state.h).
  // Default 1.
  double tpot_headroom = 1.0;
  // length_threshold: offload when uncached tokens >= this. Default 1024.
  int length_threshold = 1024;
  // cost_model: past this much prefill-worker queue the delay an offload adds to the offloads
  // queueing behind it counts whole against it; below it, only the share that pushes them
  // past their TTFT objective. Default 1 s.
  double max_prefill_queue_ms = 1000;
  // Alternate prefill workers named in an OFFLOAD decision. Default 1.
  int alternates = 1;
  SloConfig slo;

  absl::Status Validate() const;
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual const std::string& name() const = 0;
  virtual PlacementDecision Decide(const PlacementInputs& inputs, const CostModel& model) const = 0;
};

absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakePlacementPolicy(const PolicyConfig& config);

// Policy factories (one per file).
std::unique_ptr<PlacementPolicy> MakeCostModelPolicy(const PolicyConfig& config);
std::unique_ptr<PlacementPolicy> MakeAlwaysLocalPolicy(const PolicyConfig& config);
std::unique_ptr<PlacementPolicy> MakeAlwaysOffloadPolicy(const PolicyConfig& config);
std::unique_ptr<PlacementPolicy> MakeLengthThresholdPolicy(const PolicyConfig& config);

// Shared by the policies: the decision to offload to `estimate.prefill_order` (primary plus
// `alternates`), or to stay local, with `reason`.
PlacementDecision Offload(const CostEstimate& estimate, int alternates, std::string reason);
PlacementDecision Local(const CostEstimate& estimate, std::string reason);

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_PLACEMENT_PLACEMENT_POLICY_H_
