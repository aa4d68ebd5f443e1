// cost_model: offload iff the interference a local prefill would cause exceeds what the
// offload costs (transfer tail plus any TTFT it adds over local), within the SLOs
// (docs/architecture.md; the break-even rule of seed 002). The SLOs are checked first:
// a long prompt whose local prefills would push the mean TPOT of the running or arriving
// streams past --tpot_headroom of the objective (EstimateCosts' tpot_local_ms: the prompts up
// to its length arriving at their measured rates) always moves away, to a prefill worker with a
// long queue if need be (it harms many requests; a short prompt moves when the offload costs it
// less than it saves them); an offload that alone would miss the TTFT objective stays local (it
// harms one). Objectives are per request: the TTFT is the request's own; the TPOT is the tightest
// among the streams beside the prefill (the running ones this router knows, the default for those
// it does not and for streams expected to arrive meanwhile).
#include <algorithm>
#include <cmath>

#include "router/placement/placement_policy.h"

namespace pdserve::router {
namespace {

// Of the delay an offload's compute adds to the offloads that queue behind it, the share that
// harms them. They start no earlier than it ends and then compute their own prompts (about as
// long): their TTFT is about its predicted TTFT plus a compute, and the part of that beyond
// their objective harms them (the default one: whose they will be is not known, as for the
// streams a TPOT check cannot see; a batch request's loose objective is its own, not theirs).
// (Counted whole at any queue, a burst's deep but timely queues made every offload look costly, and
// long prompts were kept local beside streams of a few tokens whose TPOT then broke: 0.84x the best
// fixed policy on bursts of long prompts with 1-16-token outputs, pdserve-sim's workload family.)
// Past `queue_headroom_ms` of queue all of it does: the rest of the queue is the margin that bursts
// of prompts which cannot stay local (their chunks would break TPOT) need, and an offload that
// could stay local should not take it. (That margin was a rule outside the model, dropping such
// prefill workers; without it the policy lost 6 % of goodput on the Mooncake trace at 8 GPUs.)
double QueueingHarmShare(const PrefillEstimate& p, double compute_ms, double ttft_objective_ms,
                         double queue_headroom_ms) {
  if (compute_ms <= 0 || p.queue_ms > queue_headroom_ms) return 1;
  return std::clamp((p.ttft_ms + compute_ms - ttft_objective_ms) / compute_ms, 0.0, 1.0);
}

class CostModelPolicy final : public PlacementPolicy {
 public:
  explicit CostModelPolicy(const PolicyConfig& config) : config_(config) {}
  const std::string& name() const override { return name_; }

  PlacementDecision Decide(const PlacementInputs& in, const CostModel& model) const override {
    CostEstimate e = EstimateCosts(in, model);
    if (e.prefill.empty()) return Local(e, "no_prefill_worker");
    const SloConfig slo = in.slo.value_or(config_.slo);
    // Local prefills that stretch the decode steps past a TPOT objective on average break it
    // for the streams that decode beside them: the running ones and those expected to start
    // meanwhile.
    double tpot_beside = HUGE_VAL;
    if (in.decode.running > 0 && in.decode.streams_with_objective > 0)
      tpot_beside = in.decode.tightest_tpot_ms;
    if (in.decode.running > in.decode.streams_with_objective || e.expected_arrivals >= 1)
      tpot_beside = std::min(tpot_beside, config_.slo.tpot_ms);
    // Short streams' share is judged against each one's objective (the default one's for
    // those without), not the tightest: a batch stream's loose objective absorbs it.
    const double tpot_load = e.tpot_local_ms / tpot_beside +
                             e.short_streams_delay_ms / config_.slo.tpot_ms +
                             e.short_streams_delay_share;
    // The prediction holds the local prefills at the objective's edge, where a small error
    // in it is a large one in TPOT (the steps stretch by 1 / (1 - their share)); so steps
    // that already take longer than the objective, as measured, break it too. (Without this,
    // short prompts with 1-16-token outputs at 800 requests/s on one decode worker were kept
    // local up to ~200 tokens at a predicted 24 ms while the steps took 32-40 ms: 0.105 of
    // requests met their objectives, always_offload 1.000; pdserve-sim, the workload family.)
    const bool measured_over = in.decode.measured_step_ms > tpot_beside * config_.tpot_headroom;
    const bool breaks_tpot = (tpot_load > config_.tpot_headroom || measured_over) &&
                             in.uncached_tokens() >= config_.min_tpot_offload_tokens;
    if (in.uncached_tokens() < config_.min_offload_tokens) {
      // A short prompt is one slow step for the streams beside it: it moves only when such
      // prompts break the objective and the offload costs it less than the delay it saves them
      // (a prefill worker busy with a long prompt would cost it its TTFT; below
      // --min_tpot_offload_tokens an offload's fixed costs never pay).
      const double cost = e.transfer_tail_ms + std::max(0.0, e.ttft_offload_ms - e.ttft_local_ms);
      if (breaks_tpot && e.interference_ms > cost)
        return Offload(e, config_.alternates, "local_exceeds_tpot_slo");
      const bool warm = in.cached_tokens > 0 && in.prompt_tokens >= config_.min_offload_tokens;
      return Local(e, warm ? "warm_prefix" : "short_prompt");
    }
    // A long prompt's chunks break the objective for many requests: it moves to a prefill
    // worker even when the queues are long (a long queue costs this request alone its TTFT).
    if (breaks_tpot) {
      // When no prefill worker can meet its TTFT, to the one already the latest: the
      // offloads queued behind it there are late anyway, so its compute makes nobody late
      // who was not. Sent to the shortest queue instead it made the offloads behind it late
      // too: pdserve-sim, Azure trace at 32 GPUs (5 prefill + 27 decode workers, 159x the
      // trace's rate): 0.88 of requests met both objectives, 0.93 with this rule.
      if (e.prefill[0].ttft_ms > slo.ttft_ms) {
        std::stable_sort(e.prefill.begin(), e.prefill.end(),
                         [](const PrefillEstimate& a, const PrefillEstimate& b) {
                           return a.ttft_ms > b.ttft_ms;
                         });
        e.ttft_offload_ms = e.prefill[0].ttft_ms;
        return Offload(e, config_.alternates, "local_exceeds_tpot_slo_late");
      }
      return Offload(e, config_.alternates, "local_exceeds_tpot_slo");
    }
    e.ttft_offload_ms = e.prefill[0].ttft_ms;
    // What offloading costs: the transfer tail, plus the TTFT it adds over local beyond what
    // the TTFT objective allows anyway (time within the objective's slack costs this request
    // no SLO), plus the delay its compute adds to the offloads that queue behind it at the
    // prefill worker, as a local prefill's delays the streams beside it (without this term
    // the policy filled the prefill queues up to --max_prefill_queue whatever the decode
    // workers' room, and bursts broke TTFT there: 0.92x the best fixed policy at 32 GPUs).
    e.offload_cost_ms = e.transfer_tail_ms +
                        std::max(0.0, e.ttft_offload_ms - std::max(e.ttft_local_ms, slo.ttft_ms)) +
                        e.prefill[0].queueing_interference_ms *
                            QueueingHarmShare(e.prefill[0], e.prefill_compute_ms,
                                              config_.slo.ttft_ms, config_.max_prefill_queue_ms);
    // An offload that misses the TTFT objective while local meets it breaks it for this
    // request alone, and local harms no stream's TPOT here: stay.
    if (e.ttft_offload_ms > slo.ttft_ms && e.ttft_local_ms <= slo.ttft_ms)
      return Local(e, "slo_infeasible_offload");
    if (e.interference_ms > e.offload_cost_ms)
      return Offload(e, config_.alternates, "interference_exceeds_transfer");
    // And what staying costs this request itself, as the offload's TTFT term counts it: the
    // TTFT a local prefill adds over the offload beyond the objective. (Without it a prompt
    // queued behind a long local backlog stayed, 3.3 s predicted, where an offload met its
    // objective.)
    const double local_ttft_harm =
        std::max(0.0, e.ttft_local_ms - std::max(e.ttft_offload_ms, slo.ttft_ms));
    if (e.interference_ms + local_ttft_harm > e.offload_cost_ms)
      return Offload(e, config_.alternates, "local_exceeds_ttft_slo");
    return Local(e, "interference_below_transfer");
  }

 private:
  const std::string name_ = "cost_model";
  const PolicyConfig config_;
};

}  // namespace

std::unique_ptr<PlacementPolicy> MakeCostModelPolicy(const PolicyConfig& config) {
  return std::make_unique<CostModelPolicy>(config);
}

}  // namespace pdserve::router
