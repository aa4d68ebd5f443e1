#include "sim/steady_state.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::sim {
namespace {

// Simulations beyond this many requests would take hours; the caller asked for a window too
// short for its rate.
constexpr double kMaxRequests = 20e6;

absl::Status Seconds(const char* flag, double v) {
  if (!(v >= 0 && v <= 86400))
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": must be in [0, 86400] s"));
  return absl::OkStatus();
}

// When the requests of one copy of the window have ended if they met their objectives, in
// window time (seconds of the window's own clock, from its first arrival): a request that meets
// them ends within TTFT + (max_tokens - 1) * TPOT of being sent, and a follow-up is sent when
// its turn ends (at the earliest at its own arrival_s). Requests without objectives count from
// their arrival. `multiple`: window seconds per virtual second.
struct Deadlines {
  double last = 0;     // The last of them.
  double longest = 0;  // The longest from a request's arrival_s to its deadline.
};
Deadlines MeetingDeadlines(const std::vector<SimRequest>& window, double first, double multiple) {
  std::vector<double> deadline(window.size(), 0);
  Deadlines d;
  for (size_t i = 0; i < window.size(); ++i) {
    const SimRequest& r = window[i];
    const double arrival = r.arrival_s - first;
    double sent = arrival;
    if (r.follow_up_of >= 0 && r.follow_up_of < static_cast<int>(i))
      sent = std::max(sent, deadline[r.follow_up_of]);
    double life_s = 0;
    if (r.slo.has_value())
      life_s = (r.slo->ttft_ms + std::max(0, r.max_tokens - 1) * r.slo->tpot_ms) / 1e3;
    deadline[i] = sent + life_s * multiple;
    d.last = std::max(d.last, deadline[i]);
    d.longest = std::max(d.longest, deadline[i] - arrival);
  }
  return d;
}

}  // namespace

absl::Status SteadyState::Validate() const {
  RETURN_IF_ERROR(Seconds("warmup_s", warmup_s));
  RETURN_IF_ERROR(Seconds("measure_s", measure_s));
  return Seconds("cooldown_s", cooldown_s);
}

nlohmann::json ToJson(const SteadyState& s) {
  return {{"warmup_s", s.warmup_s}, {"measure_s", s.measure_s}, {"cooldown_s", s.cooldown_s}};
}

absl::StatusOr<std::vector<SimRequest>> SteadyStateRequests(const std::vector<SimRequest>& window,
                                                            double multiple,
                                                            const SteadyState& steady_state,
                                                            int vocab) {
  RETURN_IF_ERROR(steady_state.Validate());
  if (!steady_state.enabled()) return window;
  if (!(multiple > 0 && std::isfinite(multiple)))
    return absl::InvalidArgumentError("rate multiple: must be > 0");
  if (vocab < 2) return absl::InvalidArgumentError("vocab: must be >= 2");
  if (window.size() < 2)
    return absl::InvalidArgumentError("steady state: the window needs at least two requests");
  double first = window.front().arrival_s, last = first;
  for (size_t i = 0; i < window.size(); ++i) {
    first = std::min(first, window[i].arrival_s);
    last = std::max(last, window[i].arrival_s);
    for (int32_t t : window[i].prompt) {
      if (t < 0 || t >= vocab)
        return absl::InvalidArgumentError(absl::StrCat(
            "request ", i, ": token ", t, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  if (!(last > first))
    return absl::InvalidArgumentError("steady state: the window's arrivals are all at one time");
  const double n = static_cast<double>(window.size());
  // The next copy starts one mean gap after the window's last arrival.
  const double period = (last - first) * n / (n - 1);
  // Virtual seconds at `multiple` are `multiple` seconds of the window's time.
  // The load lasts until the last measured request has ended if it met its objectives (one
  // that ends later missed them however fast the cluster drains), however short cooldown_s:
  // outputs of 1,000 tokens at a 25 ms TPOT outlive a 20 s cool-down, and their streams
  // finished fast in a draining cluster, so that a rate above what the cluster sustains read
  // as met (goodput above the work bound, work_bound.h). The last measured copy starts one
  // period before the measured span ends. Likewise the load starts at least one request's
  // life before the first measured one arrives, so that it meets the streams of a full
  // cluster, not of one still filling.
  const Deadlines deadlines = MeetingDeadlines(window, first, multiple);
  const double warmup = std::max(steady_state.warmup_s * multiple, deadlines.longest);
  const double cooldown = std::max(steady_state.cooldown_s * multiple, deadlines.last - period);
  const double measured_copies =
      std::max(1.0, std::ceil(steady_state.measure_s * multiple / period));
  const double before = std::ceil(warmup / period), after = std::ceil(cooldown / period);
  const double copies = before + measured_copies + after;
  if (copies * n > kMaxRequests || copies >= vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "steady state: ", copies, " copies of the ", window.size(),
        "-request window would be simulated at ", multiple,
        "x its rate; use a longer trace window or a shorter --warmup_s/--measure_s/--cooldown_s"));
  }
  const int copy_count = static_cast<int>(copies);
  const int first_copy = -static_cast<int>(before);
  const double measured_end = measured_copies * period;

  std::vector<SimRequest> out;
  for (int c = 0; c < copy_count; ++c) {
    const int k = first_copy + c;  // Copy k starts at k * period; 0 is the first measured one.
    const bool measured = k >= 0 && k < static_cast<int>(measured_copies);
    const int32_t shift = c;                // Distinct per copy (copies < vocab).
    std::unordered_map<int, int> index_of;  // The window's index -> out's, for this copy.
    for (size_t i = 0; i < window.size(); ++i) {
      const SimRequest& w = window[i];
      const double t = (w.arrival_s - first) + k * period;
      if (k < 0 && t < -warmup) continue;
      if (!measured && k >= 0 && t >= measured_end + cooldown) continue;
      SimRequest r = w;
      if (w.follow_up_of >= 0) {
        auto it = index_of.find(w.follow_up_of);
        if (it == index_of.end()) continue;  // Its earlier turn was cut off.
        r.follow_up_of = it->second;
      }
      r.arrival_s = t + warmup;
      r.measured = measured;
      for (int32_t& token : r.prompt)
        token = static_cast<int32_t>((int64_t{token} + shift) % vocab);
      index_of[static_cast<int>(i)] = static_cast<int>(out.size());
      out.push_back(std::move(r));
    }
  }
  return out;
}

}  // namespace pdserve::sim
