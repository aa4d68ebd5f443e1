#include "router/placer.h"

#include "common/retry_after.h"
#include "proto/bridge/request_bridge.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "engine/block_hash.h"

namespace pdserve::router {
namespace {

int64_t KvBytesPerToken(const v1::KvLayout& l) {
  const int64_t element = l.dtype() == v1::DTYPE_F32 ? 4 : 2;
  return int64_t{l.num_layers()} * 2 * l.num_kv_heads() * l.head_dim() * element;
}

// Whether a prefill worker produces KV a decode worker can take as is: the one definition,
// KvLayout::SameGeometry (the transport checks the same before writing).
bool SameGeometry(const v1::KvLayout& a, const v1::KvLayout& b) {
  const absl::StatusOr<KvLayout> la = bridge::LayoutFromProto(a);
  const absl::StatusOr<KvLayout> lb = bridge::LayoutFromProto(b);
  return la.ok() && lb.ok() && la->SameGeometry(*lb);
}

int DecodeLoad(const WorkerEntry& e) {
  return static_cast<int>(e.load.running() + e.load.waiting() + e.load.awaiting_kv()) + e.dispatched_since_report;
}

}  // namespace

Placer::Placer(WorkerRegistry* registry, const CostModel* cost_model, const PlacementPolicy* policy,
               const PlacerConfig& config, RouterMetrics* metrics, DecisionLog* log)
    : registry_(registry), cost_model_(cost_model), policy_(policy), config_(config), metrics_(metrics), log_(log) {}

absl::StatusOr<PlacementResult> Placer::Place(const PlacementRequest& req) {
  const absl::Time start = absl::Now();
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
    bool any_capable = false;  // Some worker could hold it at all (excluded or not).
    int64_t largest_tokens = 0;  // The most prompt + output tokens one worker holds.
    bool any_fits = false;
    for (WorkerEntry* e : workers) {
      if (!e->is_decode() || e->registration.model() != model) continue;
      any_for_model = true;
      const v1::WorkerRegistration& r = e->registration;
      const int bs = static_cast<int>(r.kv_layout().block_size());
      largest_tokens = std::max<int64_t>(
          largest_tokens, std::min<int64_t>(r.max_context_tokens(), int64_t{r.kv_layout().num_blocks()} * bs - 1));
      if (prompt_len + req.max_tokens > static_cast<int>(r.max_context_tokens())) continue;
      if ((prompt_len + 1 + bs - 1) / bs > static_cast<int>(r.kv_layout().num_blocks())) continue;
      any_capable = true;
      if (std::find(req.exclude.begin(), req.exclude.end(), r.worker_id()) != req.exclude.end()) continue;
      any_fits = true;
      if (static_cast<int>(e->load.waiting()) + e->dispatched_since_report >= config_.max_waiting_per_worker) continue;
      decode.push_back(e);
    }
    if (!any_for_model) {
      error = absl::UnavailableError(absl::StrCat("no decode worker serves model '", model, "' now"));
      return;
    }
    if (!any_capable) {
      // No retry can help: the request is too big for every worker there is.
      error = absl::InvalidArgumentError(absl::StrCat(
          "prompt: ", prompt_len, " tokens plus max_tokens ", req.max_tokens, " exceed what any decode worker of model '",
          model, "' holds (at most ", largest_tokens, " tokens)"));
      return;
    }
    if (!any_fits) {
      error = absl::UnavailableError(absl::StrCat("no decode worker of model '", model, "' can hold ", prompt_len,
                                                  " prompt tokens plus max_tokens ", req.max_tokens));
      return;
    }
    if (decode.empty()) {
      error = WithRetryAfter(absl::ResourceExhaustedError(absl::StrCat("every decode worker of model '", model,
                                                                       "' has ", config_.max_waiting_per_worker,
                                                                       " requests waiting")),
                             config_.retry_after);
      return;
    }
    // Longest cached prefix per worker, hashing once per (fingerprint, block size).
    absl::flat_hash_map<PrefixIndex::Slot, int> cached_blocks;
    std::vector<std::pair<uint64_t, int>> hashed;
    std::vector<std::pair<PrefixIndex::Slot, int>> matches;
    for (WorkerEntry* e : decode) {
      const uint64_t fp = e->registration.model_fingerprint();
      const int bs = static_cast<int>(e->registration.kv_layout().block_size());
      if (std::find(hashed.begin(), hashed.end(), std::pair{fp, bs}) != hashed.end()) continue;
      hashed.emplace_back(fp, bs);
      const int cacheable = (prompt_len - 1) / bs;  // As the decode worker: one token always computes.
      const std::vector<uint64_t> hashes =
          engine::FullBlockHashes(fp, absl::MakeConstSpan(prompt).subspan(0, static_cast<size_t>(cacheable) * bs), bs);
      matches.clear();
      prefix.Match(hashes, &matches);
      for (auto [slot, blocks] : matches) cached_blocks[slot] = blocks;
    }
    auto cached_of = [&](const WorkerEntry* e) {
      auto it = cached_blocks.find(e->slot);
      return it == cached_blocks.end() ? 0 : it->second * static_cast<int>(e->registration.kv_layout().block_size());
    };
    WorkerEntry* best = *std::min_element(decode.begin(), decode.end(), [&](const WorkerEntry* a, const WorkerEntry* b) {
      if (cached_of(a) != cached_of(b)) return cached_of(a) > cached_of(b);
      if (DecodeLoad(*a) != DecodeLoad(*b)) return DecodeLoad(*a) < DecodeLoad(*b);
      return a->load.free_blocks() > b->load.free_blocks();
    });
    const v1::WorkerRegistration& r = best->registration;
    cached_tokens = cached_of(best);
    running = static_cast<int>(best->load.running()) + best->dispatched_since_report;

    PlacementInputs in;
    in.prompt_tokens = prompt_len;
    in.cached_tokens = cached_tokens;
    in.decode.running = running;
    in.decode.pending_prefill_tokens = static_cast<int64_t>(best->load.pending_prefill_tokens());
    in.decode.step_token_budget = static_cast<int>(r.max_num_batched_tokens());
    in.decode.attention_per_decode = best->attention_per_decode;
    in.decode.fingerprint = r.model_fingerprint();
    in.decode.kv_bytes_per_token = KvBytesPerToken(r.kv_layout());
    in.decode.num_layers = static_cast<int>(r.kv_layout().num_layers());
    in.decode.arrivals_per_s = best->ArrivalRate(start);
    std::vector<WorkerEntry*> prefill;
    for (WorkerEntry* e : workers) {
      if (!e->is_prefill() || e->registration.model_fingerprint() != r.model_fingerprint() ||
          !SameGeometry(e->registration.kv_layout(), r.kv_layout())) {
        continue;
      }
      PrefillCandidate c;
      c.index = static_cast<int>(prefill.size());
      c.pending_tokens = static_cast<int64_t>(e->load.pending_prefill_tokens());
      c.tokens_per_second = e->load.prefill_tokens_per_second();
      in.prefill.push_back(c);
      prefill.push_back(e);
    }
    decision = policy_->Decide(in, *cost_model_);

    // Count the request on its workers until their next reports do.
    ++best->dispatched_since_report;
    best->CountArrival(start);
    result.decode_address = r.grpc_address();
    result.decode_session = best->session;
    result.fingerprint = r.model_fingerprint();
    result.last_layer_bytes =
        static_cast<double>(prompt_len - cached_tokens) * in.decode.kv_bytes_per_token / std::max(1, in.decode.num_layers);
    v1::Placement& p = result.placement;
    p.set_decode_worker_id(r.worker_id());
    p.set_mode(decision.offload ? v1::PLACEMENT_MODE_OFFLOAD : v1::PLACEMENT_MODE_LOCAL);
    for (size_t i = 0; i < decision.prefill.size(); ++i) {
      WorkerEntry* e = prefill[decision.prefill[i]];
      v1::PrefillWorkerRef ref;
      ref.set_worker_id(e->registration.worker_id());
      ref.set_address(e->registration.grpc_address());
      result.prefill.push_back(ref);
      if (i == 0) {
        p.set_prefill_worker_id(e->registration.worker_id());
        e->load.set_pending_prefill_tokens(e->load.pending_prefill_tokens() + prompt_len);
      } else {
        p.add_alternate_prefill_worker_ids(e->registration.worker_id());
      }
    }
  });
  if (!error.ok()) return error;

  const CostEstimate& e = decision.estimate;
  v1::Placement& p = result.placement;
  p.set_reason(decision.reason);
  p.set_policy(policy_->name());
  p.set_predicted_interference_ms(e.interference_ms);
  p.set_predicted_offload_cost_ms(e.offload_cost_ms);
  p.set_predicted_ttft_local_ms(e.ttft_local_ms);
  p.set_predicted_ttft_offload_ms(e.ttft_offload_ms);
  p.set_uncached_tokens(static_cast<uint32_t>(prompt_len - cached_tokens));
  p.set_running_decodes(static_cast<uint32_t>(running));
  result.predicted_ttft_ms = decision.offload ? e.ttft_offload_ms : e.ttft_local_ms;
  result.decision_us = absl::ToDoubleMicroseconds(absl::Now() - start);

  const std::string mode = decision.offload ? "offload" : "local";
  metrics_->Placement(mode, decision.reason, policy_->name()).Increment();
  metrics_->decision_latency.Observe(result.decision_us / 1e6);
  v1::DecisionRecord record;
  record.set_request_id(req.request_id);
  record.set_model(model);
  record.set_prompt_tokens(static_cast<uint32_t>(prompt_len));
  *record.mutable_placement() = p;
  record.set_time_unix_nanos(absl::ToUnixNanos(absl::Now()));
  record.set_decision_us(result.decision_us);
  log_->Add(std::move(record));
  PDS_LOG(INFO) << "placement " << req.request_id << ": " << mode << " (" << decision.reason << ") decode="
                << p.decode_worker_id() << (decision.offload ? " prefill=" + p.prefill_worker_id() : "")
                << " prompt=" << prompt_len << " U=" << p.uncached_tokens() << " D=" << running
                << " interference=" << e.interference_ms << "ms offload_cost=" << e.offload_cost_ms
                << "ms ttft_local=" << e.ttft_local_ms << "ms ttft_offload=" << e.ttft_offload_ms << "ms";
  return result;
}

}  // namespace pdserve::router
