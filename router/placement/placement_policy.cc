#include "router/placement/placement_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace pdserve::router {

absl::Status PolicyConfig::Validate() const {
  if (name != "cost_model" && name != "always_local" && name != "always_offload" &&
      name != "length_threshold") {
    return absl::InvalidArgumentError(
        absl::StrCat("--policy: '", name,
                     "' is not one of cost_model, always_local, always_offload, length_threshold"));
  }
  if (min_offload_tokens < 1)
    return absl::InvalidArgumentError("--min_offload_tokens: must be >= 1");
  if (min_tpot_offload_tokens < 1)
    return absl::InvalidArgumentError("--min_tpot_offload_tokens: must be >= 1");
  if (!(tpot_headroom > 0 && tpot_headroom <= 1))
    return absl::InvalidArgumentError("--tpot_headroom: must be in (0, 1]");
  if (length_threshold < 1) return absl::InvalidArgumentError("--length_threshold: must be >= 1");
  if (max_prefill_queue_ms <= 0)
    return absl::InvalidArgumentError("--max_prefill_queue: must be > 0");
  if (alternates < 0 || alternates > 8)
    return absl::InvalidArgumentError("--alternates: must be in [0, 8]");
  if (slo.ttft_ms <= 0) return absl::InvalidArgumentError("--slo_ttft: must be > 0");
  if (slo.tpot_ms <= 0) return absl::InvalidArgumentError("--slo_tpot: must be > 0");
  return absl::OkStatus();
}

CostEstimate EstimateCosts(const PlacementInputs& in, const CostModel& model) {
  CostEstimate e;
  const DecodeCandidate& d = in.decode;
  const uint64_t fp = d.fingerprint;
  const double u = std::max(1, in.uncached_tokens());
  const double k = in.cached_tokens;
  const double running = d.running;
  // Decodes take one token each of the step's budget; prefill chunks get the rest.
  const double chunk = std::max(1.0, d.step_token_budget - running);
  const double chunks = std::ceil(u / chunk);
  const double step_decode =
      model.StepMs(fp, {.decode = running, .decode_attention = running * d.attention_per_decode});
  const double base = model.StepMs(fp, {});
  // The model is linear, so the prefill's share of all its mixed steps is its own term.
  const double prefill_part = std::max(0.0, model.StepMs(fp, StepWork::Chunk(u, k)) - base);
  // Requests that arrive while the prefill runs wait behind its chunks: with arrival rate
  // lambda over its duration T, lambda*T of them, each delayed T/2 on average. This is what
  // makes an idle worker's long prefill costly when traffic keeps coming (the running-decode
  // term alone is zero there).
  const double local_duration_ms = chunks * step_decode + prefill_part;
  e.expected_arrivals = d.arrivals_per_s * local_duration_ms / 1e3;
  e.interference_ms = running * prefill_part + e.expected_arrivals * local_duration_ms / 2;
  e.mixed_step_ms = step_decode + prefill_part / chunks;
  // A stream's TPOT is its mean time per token, not its slowest step: one slow step among
  // hundreds barely moves it. What does is the share of the worker's time that local
  // prefills take, rho, which stretches every decode step by 1 / (1 - rho). The policy keeps
  // prompts up to some length local and offloads the longer ones, so keeping this one local
  // means keeping its length class and the shorter ones: rho = the sum over those classes of
  // lambda_c * prefill_part(c), lambda_c the worker's arrivals of class c per second. Without
  // the mix: prefills like this one at the worker's whole rate. (Judging by the slowest step
  // offloaded every prompt whose one chunk outlasted the objective and queued them at the
  // prefill workers until TTFT broke; judging by prefills like this one overrated a long
  // prompt at a busy worker of short ones and, at 32 GPUs, sent prompts of 1-2k tokens to
  // the prefill workers until TTFT broke there: 0.92x the best fixed policy.)
  double busy_share = d.arrivals_per_s * prefill_part / 1e3;
  if (!d.arrival_classes.empty()) {
    busy_share = 0;
    for (const LengthClassRate& c : d.arrival_classes) {
      if (c.min_tokens > u) break;
      const double part = model.StepMs(fp, StepWork::Chunk(c.mean_tokens, 0)) - base;
      busy_share += c.per_s * std::max(0.0, part) / 1e3;
    }
  }
  busy_share = std::clamp(busy_share, 0.0, 0.95);
  e.tpot_local_ms = step_decode / (1 - busy_share);
  // The local backlog ahead of it, then its own chunks. Its attention is its prompts' own (a
  // worker that does not report it: taken as one prompt, which overrates many short ones).
  const double backlog = static_cast<double>(d.pending_prefill_tokens);
  StepWork backlog_work = StepWork::Chunk(backlog, 0);
  if (d.pending_prefill_token_squares > 0)
    backlog_work.prefill_attention = (d.pending_prefill_token_squares + backlog) / 2;
  const double backlog_part =
      backlog > 0 ? std::max(0.0, model.StepMs(fp, backlog_work) - base) : 0;
  const double backlog_chunks = std::ceil(backlog / chunk);
  const double queue_local = backlog_chunks * step_decode + backlog_part;
  e.ttft_local_ms = queue_local + chunks * step_decode + prefill_part;
  // A short stream beside it runs through the backlog's chunks and then its own: all of them
  // mixed steps. (Counting its own chunks alone, bursts of short prompts with 1-16-token
  // outputs queued local prefills whose steps stretched past the objective for every stream
  // that ran through them, while each prompt alone looked harmless: 0.84x always_offload at
  // 8 GPUs, pdserve-sim's workload family.)
  const double drain_chunks = backlog_chunks + chunks;
  const double drain_part = backlog_part + prefill_part;
  // That mean holds for streams long beside the prefill. A stream of n decode steps sees at
  // most min(n, C) mixed steps, C the chunks of the backlog and the prefill, so its mean step
  // grows by the prefills' part of a mixed step times min(1, C / n): whole for a stream
  // shorter than they are. Averaged
  // over the streams beside it (those of unknown length taken as long). (Without it, when
  // code-completion traffic (outputs of 1-16 tokens) followed chat traffic, cost_model kept
  // prompts of thousands of tokens local beside such streams, predicted the mean TPOT within
  // the objective from the chat phase's arrival mix, and 298 of 1,878 requests in the next
  // 20 s missed TPOT at 39 ms: pdserve-sim, the shifting mix of bench/README, rebalancing.)
  double unjudged_weight = 0;  // Streams without an objective.
  double judged_weight = 0;    // Those with one, each over its objective (1 / ms).
  int counted = 0;
  for (int b = 1; b < kStreamLengthBuckets - 1; ++b) {
    const int n = d.short_streams.count[b];
    if (n <= 0) continue;
    // The bucket's shortest stream, in decode steps, and all of them mixed up to the chunks:
    // an upper bound, as what the objective counts is streams that miss, not the mean, and
    // the short streams that arrive while the prefill runs see all of its steps. (Counting
    // the expected overlap instead, a running stream being half way through its steps on
    // average, gave 2-3 % less goodput on the shifting mix of bench/README and the same on
    // the traces.)
    const double steps = std::ldexp(1.0, b) - 1;
    const double mixed = std::min(1.0, drain_chunks / steps);
    unjudged_weight += mixed * (n - d.short_streams.with_objective[b]);
    judged_weight += mixed * d.short_streams.inverse_tpot_ms[b];
    counted += n;
  }
  if (counted > 0) {
    const double per_stream = drain_part / drain_chunks / std::max<double>(running, counted);
    e.short_streams_delay_ms = per_stream * unjudged_weight;
    e.short_streams_delay_share = per_stream * judged_weight;
  }

  // Offload: the prefill worker recomputes the whole prompt; only the last layer's transfer
  // is not hidden behind compute.
  const double last_layer_bytes =
      u * static_cast<double>(d.kv_bytes_per_token) / std::max(1, d.num_layers);
  e.transfer_tail_ms = model.TransferTailMs(last_layer_bytes);
  const double compute = model.PrefillMs(fp, in.prompt_tokens);
  e.prefill_compute_ms = compute;
  // Each candidate's TTFT (its queue, then the prompt); the queueing interference only for
  // the one an offload goes to, the first by TTFT (pricing every candidate's arrival mix was a
  // fifth of a decision among 64 prefill workers).
  std::vector<const PrefillCandidate*> source;
  source.reserve(in.prefill.size());
  e.prefill.reserve(in.prefill.size());
  for (const PrefillCandidate& p : in.prefill) {
    PrefillEstimate pe;
    pe.index = static_cast<int>(source.size());  // Into `source` until sorted.
    source.push_back(&p);
    if (p.pending_tokens > 0) {
      // Its queue at the model's price for those prompts: a queue of one long prompt takes
      // longer than as many tokens of short ones (priced at its recent throughput, a queue
      // holding a 72k-token prompt behind batches of short ones read 1.5 s for 2.5 s, and the
      // offloads sent behind it missed TTFT: pdserve-sim, Mooncake trace). A worker that
      // does not report the queue's shape: its recent throughput.
      const auto pending = static_cast<double>(p.pending_tokens);
      if (p.pending_token_squares > 0) {
        pe.queue_ms = model.PrefillMs(fp, PrefillBatchWork{pending, p.pending_token_squares});
      } else {
        pe.queue_ms = p.tokens_per_second > 0 ? pending / p.tokens_per_second * 1e3
                                              : model.PrefillMs(fp, pending);
      }
    }
    pe.ttft_ms = model.offload_overhead_ms() + pe.queue_ms + compute + e.transfer_tail_ms;
    e.prefill.push_back(pe);
  }
  std::stable_sort(
      e.prefill.begin(), e.prefill.end(),
      [](const PrefillEstimate& a, const PrefillEstimate& b) { return a.ttft_ms < b.ttft_ms; });
  const PrefillCandidate* first_source =
      e.prefill.empty() ? nullptr : source[static_cast<size_t>(e.prefill[0].index)];
  for (PrefillEstimate& pe : e.prefill) pe.index = source[static_cast<size_t>(pe.index)]->index;
  if (first_source != nullptr) {
    PrefillEstimate& first = e.prefill[0];
    const PrefillCandidate& p = *first_source;
    // Its compute delays every offload that arrives before the worker next idles. Offloads
    // keep arriving while the queue drains, so that busy period is not the queue's length but
    // 1 / (1 - rho) of it, rho the share of the worker's time the offloads sent to it take
    // (M/G/1). (Counting the queue alone, five prefill workers ran 0.9 busy on long prompts
    // while three decode workers had room for the shorter ones at half the TPOT objective;
    // a burst then overflowed the queues, the refused offloads prefilled locally and broke
    // TPOT: 0.92x length_threshold, pdserve-sim's workload family, long/medium/none/bursty.)
    ArrivalMix::Snapshot arrivals;
    if (p.arrival_mix != nullptr) {
      arrivals = p.arrival_mix->Read(p.arrivals_at);
    } else {
      arrivals = {.per_s = p.arrivals_per_s, .classes = p.arrival_classes};
    }
    double busy = arrivals.per_s * compute / 1e3;
    if (!arrivals.classes.empty()) busy = model.PrefillBusyShare(fp, arrivals.classes);
    busy = std::clamp(busy, 0.0, 0.95);
    first.queueing_interference_ms =
        arrivals.per_s / 1e3 * (first.queue_ms * compute + compute * compute / 2) / (1 - busy);
    e.ttft_offload_ms = e.prefill[0].ttft_ms;
    e.offload_cost_ms = e.transfer_tail_ms + std::max(0.0, e.ttft_offload_ms - e.ttft_local_ms) +
                        e.prefill[0].queueing_interference_ms;
  }
  return e;
}

PlacementDecision Offload(const CostEstimate& estimate, int alternates, std::string reason) {
  PlacementDecision d;
  d.offload = true;
  d.reason = std::move(reason);
  d.estimate = estimate;
  for (size_t i = 0; i < estimate.prefill.size() && static_cast<int>(i) <= alternates; ++i) {
    d.prefill.push_back(estimate.prefill[i].index);
  }
  return d;
}

PlacementDecision Local(const CostEstimate& estimate, std::string reason) {
  PlacementDecision d;
  d.reason = std::move(reason);
  d.estimate = estimate;
  return d;
}

absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakePlacementPolicy(const PolicyConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  if (config.name == "always_local") return MakeAlwaysLocalPolicy(config);
  if (config.name == "always_offload") return MakeAlwaysOffloadPolicy(config);
  if (config.name == "length_threshold") return MakeLengthThresholdPolicy(config);
  return MakeCostModelPolicy(config);
}

}  // namespace pdserve::router
