#include "router/placer.h"

#include <algorithm>
#include <climits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/retry_after.h"
#include "engine/block_hash.h"
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

absl::StatusOr<PlacementResult> Placer::Place(const PlacementRequest& req) {
  const absl::Time start = absl::Now();  // Of the decision's own (wall-clock) latency.
  // The cluster's time (the registry's clock: virtual in the simulator) for arrival rates.
  const absl::Time now = registry_->clock()->Now();
  const std::vector<int32_t>& prompt = *req.prompt;
  const int prompt_len = static_cast<int>(prompt.size());
  const std::string& model = req.model->name;
  absl::Status error;
  PlacementResult result;
  PlacementDecision decision;
  int cached_tokens = 0;
  int running = 0;

  registry_->WithLock([&](std::vector<WorkerEntry*>& workers, const PrefixIndex& prefix) {
    // Decode candidates: this model, able to hold the request, not excluded.
    std::vector<WorkerEntry*> decode;
    bool any_for_model = false;
    bool any_capable = false;    // Some worker could hold it at all (excluded or not).
    int64_t largest_tokens = 0;  // The most prompt + output tokens one worker holds.
    bool any_fits = false;
    for (WorkerEntry* e : workers) {
      if (!e->is_decode() || e->info.model != model) continue;
      any_for_model = true;
      const WorkerInfo& r = e->info;
      const int bs = r.kv_layout.block_size;
      largest_tokens = std::max<int64_t>(
          largest_tokens,
          std::min<int64_t>(r.max_context_tokens, int64_t{r.kv_layout.num_blocks} * bs - 1));
      if (prompt_len + req.max_tokens > r.max_context_tokens) continue;
      if ((prompt_len + 1 + bs - 1) / bs > r.kv_layout.num_blocks) continue;
      any_capable = true;
      if (std::find(req.exclude.begin(), req.exclude.end(), r.worker_id) != req.exclude.end())
        continue;
      if (!e->accepting()) continue;  // Changing role or stopping: what runs there finishes.
      any_fits = true;
      if (e->load.waiting + e->dispatched_since_report >= config_.max_waiting_per_worker) continue;
      decode.push_back(e);
    }
    if (!any_for_model) {
      error =
          absl::UnavailableError(absl::StrCat("no decode worker serves model '", model, "' now"));
      return;
    }
    if (!any_capable) {
      // No retry can help: the request is too big for every worker there is.
      error = absl::InvalidArgumentError(
          absl::StrCat("prompt: ", prompt_len, " tokens plus max_tokens ", req.max_tokens,
                       " exceed what any decode worker of model '", model, "' holds (at most ",
                       largest_tokens, " tokens)"));
      return;
    }
    if (!any_fits) {
      error = absl::UnavailableError(
          absl::StrCat("no decode worker of model '", model, "' can hold ", prompt_len,
                       " prompt tokens plus max_tokens ", req.max_tokens));
      return;
    }
    if (decode.empty()) {
      error = WithRetryAfter(absl::ResourceExhaustedError(
                                 absl::StrCat("every decode worker of model '", model, "' has ",
                                              config_.max_waiting_per_worker, " requests waiting")),
                             config_.retry_after);
      return;
    }
    // Longest cached prefix per worker, hashing once per (fingerprint, block size).
    absl::flat_hash_map<PrefixIndex::Slot, int> cached_blocks;
    std::vector<std::pair<uint64_t, int>> hashed;
    std::vector<std::pair<PrefixIndex::Slot, int>> matches;
    for (WorkerEntry* e : decode) {
      const uint64_t fp = e->info.model_fingerprint;
      const int bs = e->info.kv_layout.block_size;
      if (std::find(hashed.begin(), hashed.end(), std::pair{fp, bs}) != hashed.end()) continue;
      hashed.emplace_back(fp, bs);
      const int cacheable =
          (prompt_len - 1) / bs;  // As the decode worker: one token always computes.
      const std::vector<uint64_t> hashes = engine::FullBlockHashes(
          fp, absl::MakeConstSpan(prompt).subspan(0, static_cast<size_t>(cacheable) * bs), bs);
      matches.clear();
      prefix.Match(hashes, &matches);
      for (auto [slot, blocks] : matches) cached_blocks[slot] = blocks;
    }
    auto cached_of = [&](const WorkerEntry* e) {
      auto it = cached_blocks.find(e->slot);
      return it == cached_blocks.end() ? 0 : it->second * e->info.kv_layout.block_size;
    };
    // A worker's load: its request count, or with DecodeBalance::kWork the decode step time
    // its requests predict (their count and the KV positions they attend to, each at the cost
    // model's price; prices are per model fingerprint, most placements see one). PlacerConfig
    // says why counts stay the default.
    std::vector<std::pair<uint64_t, DecodeWorkPrice>> prices;
    auto price_of = [&](uint64_t fp) {
      for (const auto& [f, p] : prices)
        if (f == fp) return p;
      prices.emplace_back(fp, PriceDecodeWork(*cost_model_, fp));
      return prices.back().second;
    };
    const bool by_work = config_.decode_balance == DecodeBalance::kWork;
    std::vector<double> work(decode.size());  // By candidate, as `decode`.
    double total_work = 0;
    int total_requests = 0;
    for (size_t i = 0; i < decode.size(); ++i) {
      const WorkerEntry& e = *decode[i];
      const int requests = DecodeLoad(e);
      work[i] = requests;
      if (by_work) {
        // A fit that prices neither (not a real model) leaves the counts.
        const DecodeWorkPrice p = price_of(e.info.model_fingerprint);
        if (p.per_stream_ms > 0 || p.per_position_ms > 0)
          work[i] = p.per_stream_ms * requests + p.per_position_ms * DecodeContext(e);
      }
      total_work += work[i];
      total_requests += requests;
    }
    // Prefix affinity unless it has piled work on some workers (see PlacerConfig): the
    // spread, in requests of the candidates' mean work each, over balance_abs, and the
    // busiest over balance_rel times the idlest.
    const auto [least, most] = std::minmax_element(work.begin(), work.end());
    const double work_per_request = total_requests > 0 ? total_work / total_requests : 0;
    const bool balanced = *most - *least <= config_.balance_abs * work_per_request ||
                          *most <= config_.balance_rel * *least;
    // Whether its free blocks (as last reported) hold the uncached prompt and a token: one
    // that cannot would queue the request until others finish.
    auto fits = [&](const WorkerEntry* e) {
      const int bs = e->info.kv_layout.block_size;
      return e->load.free_blocks >= (prompt_len + 1 - cached_of(e) + bs - 1) / bs;
    };
    size_t chosen = 0;
    auto before = [&](size_t i, size_t j) {
      const WorkerEntry* a = decode[i];
      const WorkerEntry* b = decode[j];
      if (fits(a) != fits(b)) return fits(a);
      if (balanced && cached_of(a) != cached_of(b)) return cached_of(a) > cached_of(b);
      if (work[i] != work[j]) return work[i] < work[j];
      if (DecodeLoad(*a) != DecodeLoad(*b)) return DecodeLoad(*a) < DecodeLoad(*b);
      if (cached_of(a) != cached_of(b)) return cached_of(a) > cached_of(b);
      return a->load.free_blocks > b->load.free_blocks;
    };
    for (size_t i = 1; i < decode.size(); ++i)
      if (before(i, chosen)) chosen = i;
    WorkerEntry* best = decode[chosen];
    const WorkerInfo& r = best->info;
    cached_tokens = cached_of(best);
    running = best->load.running + best->dispatched_since_report;

    PlacementInputs in;
    in.prompt_tokens = prompt_len;
    in.cached_tokens = cached_tokens;
    in.decode.running = running;
    in.decode.pending_prefill_tokens = best->load.pending_prefill_tokens;
    in.decode.step_token_budget = r.max_num_batched_tokens;
    in.decode.attention_per_decode = best->attention_per_decode;
    in.decode.fingerprint = r.model_fingerprint;
    in.decode.kv_bytes_per_token = r.kv_bytes_per_token();
    in.decode.num_layers = r.kv_layout.num_layers;
    in.decode.arrivals_per_s = best->arrivals.Rate(now);
    in.decode.arrival_classes = best->arrivals.Classes(now);
    in.decode.streams_with_objective = static_cast<int>(best->tpot_objectives.size());
    if (!best->tpot_objectives.empty()) in.decode.tightest_tpot_ms = *best->tpot_objectives.begin();
    in.slo = req.slo;
    std::vector<WorkerEntry*> prefill;
    for (WorkerEntry* e : workers) {
      // The one definition of "KV a decode worker can take as is" (the transport checks the same
      // before writing): KvLayout::SameGeometry.
      if (!e->is_prefill() || !e->accepting() || e->info.model_fingerprint != r.model_fingerprint ||
          !e->info.kv_layout.SameGeometry(r.kv_layout)) {
        continue;
      }
      PrefillCandidate c;
      c.index = static_cast<int>(prefill.size());
      c.pending_tokens = e->load.pending_prefill_tokens;
      c.tokens_per_second = e->load.prefill_tokens_per_second;
      c.arrivals_per_s = e->arrivals.Rate(now);
      in.prefill.push_back(c);
      prefill.push_back(e);
    }
    decision = policy_->Decide(in, *cost_model_);

    // Count the request on its workers until their next reports do.
    ++best->dispatched_since_report;
    best->dispatched_tokens_since_report += prompt_len;
    best->arrivals.Count(now, prompt_len - cached_tokens);
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
