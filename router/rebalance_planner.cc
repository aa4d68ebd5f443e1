#include "router/rebalance_planner.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "router/decode_work.h"

namespace pdserve::router {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

bool Taking(const PlannerWorker& w, WorkerRole role) { return w.accepting && w.role == role; }

int Count(const PlannerSnapshot& s, WorkerRole role) {
  return static_cast<int>(std::count_if(s.workers.begin(), s.workers.end(),
                                        [&](const PlannerWorker& w) { return Taking(w, role); }));
}

}  // namespace

absl::Status RebalanceConfig::Validate() const {
  if (interval <= absl::ZeroDuration())
    return absl::InvalidArgumentError("--rebalance_interval: must be positive");
  if (min_between < absl::ZeroDuration())
    return absl::InvalidArgumentError("--rebalance_min_between: must not be negative");
  if (confirm < 1) return absl::InvalidArgumentError("--rebalance_confirm: must be at least 1");
  if (max_moves < 1) return absl::InvalidArgumentError("--rebalance_max_moves: must be at least 1");
  if (!(high > 0) || !(margin >= 0) || !(margin < high)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rebalance_high and --rebalance_margin: need high > 0 and 0 <= margin < high, got ", high,
        " and ", margin));
  }
  return absl::OkStatus();
}

PlannerSnapshot SnapshotForPlanner(const std::vector<WorkerEntry*>& workers,
                                   const std::string& model, const CostModel& cost_model,
                                   const SloConfig& slo, absl::Time now) {
  PlannerSnapshot s;
  s.slo = slo;
  for (const WorkerEntry* e : workers) {
    if (e->info.model != model) continue;
    PlannerWorker w;
    w.worker_id = e->info.worker_id;
    w.role = e->info.role;
    w.can_switch = e->info.role_switching;
    w.accepting = e->reported && e->accepting();
    const uint64_t fp = e->info.model_fingerprint;
    const double pending = static_cast<double>(e->load.pending_prefill_tokens);
    // A backlog at the cost model's price for its prompts, as the placer prices it: by its
    // shape when the worker reports it (the sum of its prompts' lengths squared), else as one
    // prompt.
    const double squares = e->load.pending_prefill_token_squares;
    auto priced_s = [&] {
      return cost_model.PrefillMs(fp, squares > 0 ? PrefillBatchWork{pending, squares}
                                                  : PrefillBatchWork::Prompt(pending)) /
             1000;
    };
    if (e->is_decode()) {
      const DecodeWorkPrice price = PriceDecodeWork(cost_model, fp);
      w.streams = DecodeLoad(*e);
      // The decode role's work is the streams that decode: those awaiting offloaded KV wait on
      // the prefill role (and the context they hold is counted in proportion).
      const int decoding = std::max(0, w.streams - e->load.awaiting_kv);
      const double context =
          w.streams > 0 ? DecodeContext(*e) * decoding / static_cast<double>(w.streams) : 0;
      w.base_step_ms = cost_model.StepMs(fp, {});
      w.step_ms = w.base_step_ms + price.per_stream_ms * decoding + price.per_position_ms * context;
      w.backlog_s = pending > 0 ? priced_s() : 0;
      const double step_s = (e->measured_step_ms > 0 ? e->measured_step_ms : w.step_ms) / 1000;
      for (const auto& [key, span] : e->lease_spans) {
        w.drain_s = std::max(w.drain_s,
                             span.max_tokens * step_s - absl::ToDoubleSeconds(now - span.acquired));
      }
    } else {
      // A prefill worker that does not report the shape: its measured throughput.
      w.backlog_s = pending <= 0 ? 0
                    : squares > 0 || e->load.prefill_tokens_per_second <= 0
                        ? priced_s()
                        : pending / e->load.prefill_tokens_per_second;
    }
    s.workers.push_back(std::move(w));
  }
  return s;
}

double RebalancePlanner::DecodePressure(const PlannerSnapshot& s, int workers) {
  double work = 0;  // Above the fixed cost, summed.
  double base = 0;
  for (const PlannerWorker& w : s.workers) {
    if (!Taking(w, WorkerRole::kDecode)) continue;
    work += std::max(0.0, w.step_ms - w.base_step_ms);
    base = std::max(base, w.base_step_ms);
  }
  if (workers <= 0) return work > 0 ? kInfinity : 0;
  return (base + work / workers) / s.slo.tpot_ms;
}

double RebalancePlanner::PrefillPressure(const PlannerSnapshot& s, int workers) {
  // The prompts waiting on prefill workers, and those the decode workers prefill themselves
  // (chunked beside their streams: what more prefill workers would take off them), per
  // prefill worker.
  double backlog = 0;
  for (const PlannerWorker& w : s.workers) {
    if (w.accepting) backlog += w.backlog_s;
  }
  if (workers <= 0) return backlog > 0 ? kInfinity : 0;
  return backlog / workers / (s.slo.ttft_ms / 1000);
}

std::vector<RebalanceOrder> RebalancePlanner::Look(const PlannerSnapshot& s, absl::Time now) {
  const bool in_change = std::any_of(s.workers.begin(), s.workers.end(),
                                     [](const PlannerWorker& w) { return !w.accepting; });
  if (in_change) {
    // A worker registering, draining or switching: the pressures are about to change.
    short_prefill_looks_ = short_decode_looks_ = 0;
    return {};
  }
  const int decode = Count(s, WorkerRole::kDecode);
  const int prefill = Count(s, WorkerRole::kPrefill);
  if (decode == 0 || prefill == 0) {
    // It moves workers between two roles a cluster has; it does not create one (a cluster
    // without prefill workers is a deliberate choice, e.g. always_local).
    short_prefill_looks_ = short_decode_looks_ = 0;
    return {};
  }
  const double d = DecodePressure(s, decode);
  const double p = PrefillPressure(s, prefill);
  const double worst = std::max(d, p);
  // The workers that may move, the cheapest to move first: decode workers by their drain
  // time, then their streams; prefill workers by their backlog.
  std::vector<const PlannerWorker*> to_prefill;
  std::vector<const PlannerWorker*> to_decode;
  for (const PlannerWorker& w : s.workers) {
    if (!w.can_switch) continue;
    (w.role == WorkerRole::kDecode ? to_prefill : to_decode).push_back(&w);
  }
  std::stable_sort(
      to_prefill.begin(), to_prefill.end(), [](const PlannerWorker* a, const PlannerWorker* b) {
        return a->drain_s != b->drain_s ? a->drain_s < b->drain_s : a->streams < b->streams;
      });
  std::stable_sort(
      to_decode.begin(), to_decode.end(),
      [](const PlannerWorker* a, const PlannerWorker* b) { return a->backlog_s < b->backlog_s; });
  // How many to move toward the busier role: the count that leaves the busier of the two
  // roles least loaded (the balance point between them), at most max_moves and the movable
  // workers, never emptying a role. After a shift of the mix the balance may be several
  // workers away; moving them one per min_between leaves the cluster short for as many
  // intervals (the shifting mix of bench/README: three workers, 20 s, while the phase's first
  // requests missed their objectives).
  const bool prefill_busier = p >= d;
  const int movable = std::min<int>(
      {config_.max_moves, static_cast<int>((prefill_busier ? to_prefill : to_decode).size()),
       (prefill_busier ? decode : prefill) - 1});
  int moves = 0;
  double after = worst;
  for (int k = 1; k <= movable; ++k) {
    const double busier =
        prefill_busier ? std::max(DecodePressure(s, decode - k), PrefillPressure(s, prefill + k))
                       : std::max(DecodePressure(s, decode + k), PrefillPressure(s, prefill - k));
    if (busier >= after) break;  // Past the balance point.
    after = busier;
    moves = k;
  }
  // A move pays when the cluster is busy and it lowers the busier role's pressure by the
  // margin: the split follows the load without swinging back and forth around a balance.
  const bool pays = worst > config_.high && moves > 0 && after < worst * (1 - config_.margin);
  short_prefill_looks_ = pays && prefill_busier ? short_prefill_looks_ + 1 : 0;
  short_decode_looks_ = pays && !prefill_busier ? short_decode_looks_ + 1 : 0;
  if (now - last_order_ < config_.min_between) return {};
  if (std::max(short_prefill_looks_, short_decode_looks_) < config_.confirm) return {};
  short_prefill_looks_ = short_decode_looks_ = 0;
  const std::string reason = absl::StrFormat(
      "rebalance: prefill pressure %.2f on %d prefill workers, decode pressure %.2f on %d decode "
      "workers; the busier role at %.2f after %d %s",
      p, prefill, d, decode, after, moves, moves == 1 ? "move" : "moves");
  std::vector<RebalanceOrder> orders;
  for (int i = 0; i < moves; ++i) {
    const PlannerWorker* w = prefill_busier ? to_prefill[i] : to_decode[i];
    orders.push_back({.worker_id = w->worker_id,
                      .to = prefill_busier ? WorkerRole::kPrefill : WorkerRole::kDecode,
                      .reason = reason});
  }
  return orders;
}

}  // namespace pdserve::router
