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
  if (!(high > 0) || !(margin >= 0) || !(margin < high)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rebalance_high and --rebalance_margin: need high > 0 and 0 <= margin < high, got ", high,
        " and ", margin));
  }
  return absl::OkStatus();
}

PlannerSnapshot SnapshotForPlanner(const std::vector<WorkerEntry*>& workers,
                                   const std::string& model, const CostModel& cost_model,
                                   const SloConfig& slo) {
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

std::optional<RebalanceOrder> RebalancePlanner::Look(const PlannerSnapshot& s, absl::Time now) {
  const bool in_change = std::any_of(s.workers.begin(), s.workers.end(),
                                     [](const PlannerWorker& w) { return !w.accepting; });
  if (in_change) {
    // A worker registering, draining or switching: the pressures are about to change.
    short_prefill_looks_ = short_decode_looks_ = 0;
    return std::nullopt;
  }
  const int decode = Count(s, WorkerRole::kDecode);
  const int prefill = Count(s, WorkerRole::kPrefill);
  if (decode == 0 || prefill == 0) {
    // It moves workers between two roles a cluster has; it does not create one (a cluster
    // without prefill workers is a deliberate choice, e.g. always_local).
    short_prefill_looks_ = short_decode_looks_ = 0;
    return std::nullopt;
  }
  const double d = DecodePressure(s, decode);
  const double p = PrefillPressure(s, prefill);
  const double worst = std::max(d, p);
  const PlannerWorker* to_prefill = nullptr;  // The decode worker with the fewest streams.
  const PlannerWorker* to_decode = nullptr;   // The prefill worker with the least backlog.
  for (const PlannerWorker& w : s.workers) {
    if (!w.can_switch) continue;
    if (w.role == WorkerRole::kDecode && (to_prefill == nullptr || w.streams < to_prefill->streams))
      to_prefill = &w;
    if (w.role == WorkerRole::kPrefill &&
        (to_decode == nullptr || w.backlog_s < to_decode->backlog_s))
      to_decode = &w;
  }
  // The busier role after each move (a role is never left empty).
  const double after_to_prefill =
      decode >= 2 ? std::max(DecodePressure(s, decode - 1), PrefillPressure(s, prefill + 1))
                  : kInfinity;
  const double after_to_decode =
      prefill >= 2 ? std::max(DecodePressure(s, decode + 1), PrefillPressure(s, prefill - 1))
                   : kInfinity;
  // A move pays when the cluster is busy and it lowers the busier role's pressure by the
  // margin: the split follows the load without swinging back and forth around a balance.
  const double bar = worst * (1 - config_.margin);
  const bool busy = worst > config_.high;
  const bool prefill_short = busy && to_prefill != nullptr && p >= d && after_to_prefill < bar;
  const bool decode_short = busy && to_decode != nullptr && d > p && after_to_decode < bar;
  short_prefill_looks_ = prefill_short ? short_prefill_looks_ + 1 : 0;
  short_decode_looks_ = decode_short ? short_decode_looks_ + 1 : 0;
  if (now - last_order_ < config_.min_between) return std::nullopt;
  const bool move_to_prefill = short_prefill_looks_ >= config_.confirm;
  const bool move_to_decode = short_decode_looks_ >= config_.confirm;
  if (!move_to_prefill && !move_to_decode) return std::nullopt;
  short_prefill_looks_ = short_decode_looks_ = 0;
  RebalanceOrder order;
  order.worker_id = move_to_prefill ? to_prefill->worker_id : to_decode->worker_id;
  order.to = move_to_prefill ? WorkerRole::kPrefill : WorkerRole::kDecode;
  order.reason = absl::StrFormat(
      "rebalance: prefill pressure %.2f on %d prefill workers, decode pressure %.2f on %d decode "
      "workers; the busier role at %.2f after the move",
      p, prefill, d, decode, move_to_prefill ? after_to_prefill : after_to_decode);
  return order;
}

}  // namespace pdserve::router
