#include "router/placement_inputs.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/retry_after.h"

namespace pdserve::router {

absl::StatusOr<std::vector<WorkerEntry*>> DecodeCandidates(absl::Span<WorkerEntry* const> workers,
                                                           const DecodeDemand& demand) {
  std::vector<WorkerEntry*> decode;
  bool any_for_model = false;
  bool any_capable = false;    // Some worker could hold it at all (excluded or not).
  int64_t largest_tokens = 0;  // The most prompt + output tokens one worker holds.
  bool any_fits = false;
  const int prompt_len = demand.prompt_tokens;
  for (WorkerEntry* e : workers) {
    if (!e->is_decode() || e->info.model != demand.model) continue;
    any_for_model = true;
    const WorkerInfo& r = e->info;
    const int bs = r.kv_layout.block_size;
    largest_tokens = std::max<int64_t>(
        largest_tokens,
        std::min<int64_t>(r.max_context_tokens, int64_t{r.kv_layout.num_blocks} * bs - 1));
    if (prompt_len + demand.max_tokens > r.max_context_tokens) continue;
    if ((prompt_len + 1 + bs - 1) / bs > r.kv_layout.num_blocks) continue;
    any_capable = true;
    if (std::find(demand.exclude.begin(), demand.exclude.end(), r.worker_id) !=
        demand.exclude.end())
      continue;
    if (!e->accepting()) continue;  // Changing role or stopping: what runs there finishes.
    any_fits = true;
    if (e->load.waiting + e->dispatched_since_report >= demand.max_waiting_per_worker) continue;
    decode.push_back(e);
  }
  if (!any_for_model) {
    return absl::UnavailableError(
        absl::StrCat("no decode worker serves model '", demand.model, "' now"));
  }
  if (!any_capable) {
    // No retry can help: the request is too big for every worker there is.
    return absl::InvalidArgumentError(
        absl::StrCat("prompt: ", prompt_len, " tokens plus max_tokens ", demand.max_tokens,
                     " exceed what any decode worker of model '", demand.model, "' holds (at most ",
                     largest_tokens, " tokens)"));
  }
  if (!any_fits) {
    return absl::UnavailableError(
        absl::StrCat("no decode worker of model '", demand.model, "' can hold ", prompt_len,
                     " prompt tokens plus max_tokens ", demand.max_tokens));
  }
  if (decode.empty()) {
    return WithRetryAfter(absl::ResourceExhaustedError(
                              absl::StrCat("every decode worker of model '", demand.model, "' has ",
                                           demand.max_waiting_per_worker, " requests waiting")),
                          demand.retry_after);
  }
  return decode;
}

bool AffinityMayLead(absl::Span<const CandidateView> candidates, int balance_abs,
                     double balance_rel) {
  if (candidates.empty()) return true;
  double total_work = 0;
  int total_requests = 0;
  double least = candidates[0].work;
  double most = candidates[0].work;
  for (const CandidateView& c : candidates) {
    total_work += c.work;
    total_requests += c.requests;
    least = std::min(least, c.work);
    most = std::max(most, c.work);
  }
  const double work_per_request = total_requests > 0 ? total_work / total_requests : 0;
  return most - least <= balance_abs * work_per_request || most <= balance_rel * least;
}

size_t ChooseDecode(absl::Span<const CandidateView> candidates, bool affinity_leads) {
  auto before = [&](const CandidateView& a, const CandidateView& b) {
    if (a.fits != b.fits) return a.fits;
    if (affinity_leads && a.cached_tokens != b.cached_tokens)
      return a.cached_tokens > b.cached_tokens;
    if (a.work != b.work) return a.work < b.work;
    if (a.requests != b.requests) return a.requests < b.requests;
    if (a.cached_tokens != b.cached_tokens) return a.cached_tokens > b.cached_tokens;
    return a.free_blocks > b.free_blocks;
  };
  size_t chosen = 0;
  for (size_t i = 1; i < candidates.size(); ++i)
    if (before(candidates[i], candidates[chosen])) chosen = i;
  return chosen;
}

std::vector<WorkerEntry*> PrefillCandidatesFor(absl::Span<WorkerEntry* const> workers,
                                               const WorkerInfo& decode) {
  std::vector<WorkerEntry*> prefill;
  for (WorkerEntry* e : workers) {
    // The one definition of "KV a decode worker can take as is" (the transport checks the
    // same before writing): KvLayout::SameGeometry.
    if (e->is_prefill() && e->accepting() &&
        e->info.model_fingerprint == decode.model_fingerprint &&
        e->info.kv_layout.SameGeometry(decode.kv_layout)) {
      prefill.push_back(e);
    }
  }
  return prefill;
}

PlacementInputs BuildPlacementInputs(const WorkerEntry& decode, int prompt_tokens,
                                     int cached_tokens, absl::Span<WorkerEntry* const> prefill,
                                     absl::Time now, const std::optional<SloConfig>& slo) {
  const WorkerInfo& r = decode.info;
  PlacementInputs in;
  in.prompt_tokens = prompt_tokens;
  in.cached_tokens = cached_tokens;
  in.decode.running = decode.load.running + decode.dispatched_since_report;
  in.decode.pending_prefill_tokens = decode.load.pending_prefill_tokens;
  in.decode.pending_prefill_token_squares = decode.load.pending_prefill_token_squares;
  in.decode.step_token_budget = r.max_num_batched_tokens;
  in.decode.attention_per_decode = decode.attention_per_decode;
  in.decode.measured_step_ms = decode.measured_step_ms;
  in.decode.fingerprint = r.model_fingerprint;
  in.decode.kv_bytes_per_token = r.kv_bytes_per_token();
  in.decode.num_layers = r.kv_layout.num_layers;
  ArrivalMix::Snapshot decode_arrivals = decode.arrivals.Read(now);
  in.decode.arrivals_per_s = decode_arrivals.per_s;
  in.decode.arrival_classes = std::move(decode_arrivals.classes);
  in.decode.streams_with_objective = static_cast<int>(decode.tpot_objectives.size());
  if (!decode.tpot_objectives.empty()) in.decode.tightest_tpot_ms = *decode.tpot_objectives.begin();
  in.decode.short_streams = decode.streams_by_length;
  in.slo = slo;
  for (size_t i = 0; i < prefill.size(); ++i) {
    const WorkerEntry& e = *prefill[i];
    PrefillCandidate c;
    c.index = static_cast<int>(i);
    c.pending_tokens = e.load.pending_prefill_tokens;
    c.pending_token_squares = e.load.pending_prefill_token_squares;
    c.tokens_per_second = e.load.prefill_tokens_per_second;
    c.arrival_mix = &e.arrivals;  // Read if it is the one an offload goes to.
    c.arrivals_at = now;
    in.prefill.push_back(c);
  }
  return in;
}

}  // namespace pdserve::router
