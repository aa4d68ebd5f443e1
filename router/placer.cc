#include "router/placer.h"

#include <algorithm>
#include <climits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/retry_after.h"
#include "kvcache/block_hash.h"
#include "router/decode_work.h"

namespace pdserve::router {

absl::StatusOr<DecodeBalance> ParseDecodeBalance(absl::string_view text, absl::string_view flag) {
  if (text == "work") return DecodeBalance::kWork;
  if (text == "streams") return DecodeBalance::kStreams;
  return absl::InvalidArgumentError(
      absl::StrCat(flag, ": '", text, "' is not one of work, streams"));
}

Placer::Placer(WorkerRegistry* registry, const CostModel* cost_model, const PlacementPolicy* policy,
               const PlacerConfig& config, RouterMetrics* metrics, DecisionLog* log)
    : registry_(registry),
      cost_model_(cost_model),
      policy_(policy),
      config_(config),
      metrics_(metrics),
      log_(log) {}

std::vector<CandidateView> Placer::ViewCandidates(absl::Span<WorkerEntry* const> decode,
                                                  const PrefixIndex& prefix,
                                                  absl::Span<const int32_t> prompt) const {
  const int prompt_len = static_cast<int>(prompt.size());
  // Longest cached prefix per worker, hashing once per (fingerprint, block size).
  absl::flat_hash_map<PrefixIndex::Slot, int> cached_blocks;
  std::vector<std::pair<uint64_t, int>> hashed;
  std::vector<std::pair<PrefixIndex::Slot, int>> matches;
  for (const WorkerEntry* e : decode) {
    const uint64_t fp = e->info.model_fingerprint;
    const int bs = e->info.kv_layout.block_size;
    if (std::find(hashed.begin(), hashed.end(), std::pair{fp, bs}) != hashed.end()) continue;
    hashed.emplace_back(fp, bs);
    const int cacheable = (prompt_len - 1) / bs;  // As the decode worker: one token computes.
    // The chained block hashes (kvcache::FullBlockHashes), made only as far as they match.
    uint64_t parent = 0;
    matches.clear();
    prefix.Match(
        static_cast<size_t>(std::max(0, cacheable)),
        [&](size_t i) {
          parent = kvcache::BlockHash(fp, parent, prompt.subspan(i * bs, static_cast<size_t>(bs)));
          return parent;
        },
        &matches);
    for (auto [slot, blocks] : matches) cached_blocks[slot] = blocks;
  }
  // A worker's load: its request count, or with DecodeBalance::kWork the decode step time its
  // requests predict (their count and the KV positions they attend to, each at the cost
  // model's price; prices are per model fingerprint, most placements see one). PlacerConfig
  // says why counts stay the default.
  std::vector<std::pair<uint64_t, DecodeWorkPrice>> prices;
  auto price_of = [&](uint64_t fp) {
    for (const auto& [f, p] : prices)
      if (f == fp) return p;
    prices.emplace_back(fp, PriceDecodeWork(*cost_model_, fp));
    return prices.back().second;
  };
  std::vector<CandidateView> views(decode.size());
  for (size_t i = 0; i < decode.size(); ++i) {
    const WorkerEntry& e = *decode[i];
    const int bs = e.info.kv_layout.block_size;
    CandidateView& v = views[i];
    auto it = cached_blocks.find(e.slot);
    v.cached_tokens = it == cached_blocks.end() ? 0 : it->second * bs;
    // Whether its free blocks (as last reported) hold the uncached prompt and a token: one
    // that cannot would queue the request until others finish.
    v.fits = e.load.free_blocks >= (prompt_len + 1 - v.cached_tokens + bs - 1) / bs;
    v.requests = DecodeLoad(e);
    v.work = v.requests;
    v.free_blocks = e.load.free_blocks;
    if (config_.decode_balance == DecodeBalance::kWork) {
      // A fit that prices neither (not a real model) leaves the counts.
      const DecodeWorkPrice p = price_of(e.info.model_fingerprint);
      if (p.per_stream_ms > 0 || p.per_position_ms > 0)
        v.work = p.per_stream_ms * v.requests + p.per_position_ms * DecodeContext(e);
    }
  }
  return views;
}

absl::StatusOr<PlacementResult> Placer::Place(const PlacementRequest& req) {
  const absl::Time start = absl::Now();  // Of the decision's own (wall-clock) latency.
  // The cluster's time (the registry's clock: virtual in the simulator) for arrival rates.
  const absl::Time now = registry_->clock()->Now();
  const std::vector<int32_t>& prompt = *req.prompt;
  const int prompt_len = static_cast<int>(prompt.size());
  const std::string& model = req.model->name;
  DecodeDemand demand;
  demand.model = model;
  demand.prompt_tokens = prompt_len;
  demand.max_tokens = req.max_tokens;
  demand.exclude = req.exclude;
  demand.max_waiting_per_worker = config_.max_waiting_per_worker;
  demand.retry_after = config_.retry_after;
  absl::Status error;
  PlacementResult result;
  PlacementDecision decision;
  int cached_tokens = 0;
  int running = 0;

  registry_->WithLock([&](std::vector<WorkerEntry*>& workers, const PrefixIndex& prefix) {
    absl::StatusOr<std::vector<WorkerEntry*>> decode = DecodeCandidates(workers, demand);
    if (!decode.ok()) {
      error = decode.status();
      return;
    }
    const std::vector<CandidateView> views =
        ViewCandidates(*decode, prefix, absl::MakeConstSpan(prompt));
    const size_t chosen =
        ChooseDecode(views, AffinityMayLead(views, config_.balance_abs, config_.balance_rel));
    WorkerEntry* best = (*decode)[chosen];
    const WorkerInfo& r = best->info;
    cached_tokens = views[chosen].cached_tokens;
    const std::vector<WorkerEntry*> prefill = PrefillCandidatesFor(workers, r);
    const PlacementInputs in =
        BuildPlacementInputs(*best, prompt_len, cached_tokens, prefill, now, req.slo);
    running = in.decode.running;
    decision = policy_->Decide(in, *cost_model_);

    // Count the request on its workers until their next reports do.
    ++best->dispatched_since_report;
    best->dispatched_tokens_since_report += prompt_len;
    best->arrivals.Count(now, prompt_len - cached_tokens);
    // A local prefill queues ahead of the next local one there: counted until the worker's
    // next report does, as an offload on its prefill worker below. (Without it a clump of
    // requests arriving together was judged against the last report: behind a 121k-token
    // prompt placed a moment before, prompts predicted to start at once waited 6.9 s.)
    if (!decision.offload) {
      best->load.pending_prefill_tokens += prompt_len - cached_tokens;
      best->load.pending_prefill_token_squares +=
          static_cast<double>(prompt_len) * prompt_len -
          static_cast<double>(cached_tokens) * cached_tokens;
    }
    result.decode_session = best->session;
    result.fingerprint = r.model_fingerprint;
    result.num_layers = std::max(1, in.decode.num_layers);
    result.last_layer_bytes = static_cast<double>(prompt_len - cached_tokens) *
                              in.decode.kv_bytes_per_token / std::max(1, in.decode.num_layers);
    Placement& p = result.placement;
    p.decode = WorkerRef{r.worker_id, r.grpc_address};
    p.offload = decision.offload;
    for (size_t i = 0; i < decision.prefill.size(); ++i) {
      WorkerEntry* e = prefill[decision.prefill[i]];
      p.prefill.push_back(WorkerRef{e->info.worker_id, e->info.grpc_address});
      // Counted on the primary until its next report does.
      if (i == 0) {
        e->load.pending_prefill_tokens += prompt_len;
        e->load.pending_prefill_token_squares += static_cast<double>(prompt_len) * prompt_len;
        e->arrivals.Count(now, prompt_len);
      }
    }
  });
  if (!error.ok()) return error;

  const CostEstimate& e = decision.estimate;
  Placement& p = result.placement;
  p.reason = decision.reason;
  p.policy = policy_->name();
  p.predicted_interference_ms = e.interference_ms;
  p.predicted_offload_cost_ms = e.offload_cost_ms;
  p.predicted_ttft_local_ms = e.ttft_local_ms;
  p.predicted_ttft_offload_ms = e.ttft_offload_ms;
  p.uncached_tokens = prompt_len - cached_tokens;
  p.running_decodes = running;
  result.predicted_ttft_ms = decision.offload ? e.ttft_offload_ms : e.ttft_local_ms;
  result.decision_us = absl::ToDoubleMicroseconds(absl::Now() - start);

  const std::string mode = decision.offload ? "offload" : "local";
  metrics_->Placement(mode, decision.reason, policy_->name()).Increment();
  metrics_->decision_latency.Observe(result.decision_us / 1e6);
  log_->Add(DecisionRecord{.request_id = req.request_id,
                           .model = model,
                           .prompt_tokens = prompt_len,
                           .placement = p,
                           .time = now,
                           .decision_us = result.decision_us});
  PDS_LOG(INFO) << "placement " << req.request_id << ": " << mode << " (" << decision.reason
                << ") decode=" << p.decode.worker_id
                << (decision.offload && !p.prefill.empty()
                        ? " prefill=" + p.prefill.front().worker_id
                        : "")
                << " prompt=" << prompt_len << " U=" << p.uncached_tokens << " D=" << running
                << " interference=" << e.interference_ms << "ms offload_cost=" << e.offload_cost_ms
                << "ms ttft_local=" << e.ttft_local_ms << "ms ttft_offload=" << e.ttft_offload_ms
                << "ms";
  return result;
}

}  // namespace pdserve::router
