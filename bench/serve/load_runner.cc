#include "bench/serve/load_runner.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "tools/measure/report.h"

namespace pdserve::bench {

using measure::Percentile;
using measure::SweepGoodput;
using measure::WorkloadRequest;
namespace {

// Through the HTTP API: TTFT and gaps between the events that carry text, as OpenAI benchmark
// harnesses time them; the answer's ids are its text re-tokenized (a follow-up's prefix may then
// differ from the generated ids in its last few tokens).
RequestResult SendHttp(const LoadTarget& target, std::vector<int32_t> prompt, int max_tokens,
                       const std::string& kind, const client::RequestObjectives& objectives) {
  const client::OpenAiStreamOutcome out =
      client::StreamCompletion(target.http, prompt, max_tokens, /*ignore_eos=*/true,
                               absl::Minutes(5), /*temperature=*/0.0f, objectives);
  RequestResult r;
  r.kind = kind;
  r.prompt = std::move(prompt);
  if (!out.ok() || out.event_times.empty()) {
    r.error = out.ok() ? "no text" : absl::StrCat(out.http_status, " ", out.error);
    return r;
  }
  r.ok = true;
  r.ttft_ms = absl::ToDoubleMilliseconds(out.event_times[0] - out.start);
  r.e2e_ms = absl::ToDoubleMilliseconds(out.event_times.back() - out.start);
  for (size_t i = 1; i < out.event_times.size(); ++i)
    r.itl_ms.push_back(absl::ToDoubleMilliseconds(out.event_times[i] - out.event_times[i - 1]));
  if (out.completion_tokens > 1) {
    r.tpot_ms = absl::ToDoubleMilliseconds(out.event_times.back() - out.event_times[0]) /
                (out.completion_tokens - 1);
  }
  r.offloaded = out.placement_mode == "offload" && !out.fell_back_to_local;
  if (target.tokenizer != nullptr) {
    auto ids = target.tokenizer->Encode(out.text, /*add_special_tokens=*/false);
    if (ids.ok()) r.output = *std::move(ids);
  }
  return r;
}

// Each request carries its kind's objectives (0: none, the router's defaults), so a chat is
// placed for a chat's TTFT and not for the documents' beside it.

}  // namespace

RequestResult Send(const LoadTarget& target, std::vector<int32_t> prompt, int max_tokens,
                   const std::string& kind, const client::RequestObjectives& objectives) {
  if (!target.http.empty())
    return SendHttp(target, std::move(prompt), max_tokens, kind, objectives);
  const std::shared_ptr<grpc::Channel>& channel = target.channel;
  v1::GenerateRequest request = client::MakeRequest(prompt, max_tokens);
  request.mutable_sampling()->set_ignore_eos(true);
  if (objectives.ttft_ms > 0) request.mutable_objectives()->set_ttft_ms(objectives.ttft_ms);
  if (objectives.tpot_ms > 0) request.mutable_objectives()->set_tpot_ms(objectives.tpot_ms);
  const client::GenerationOutcome out = client::CallGenerate(channel, request, absl::Minutes(5));
  RequestResult r;
  r.kind = kind;
  r.prompt = std::move(prompt);
  if (!out.status.ok() || out.token_times.empty()) {
    r.error = out.status.ok() ? "no tokens" : out.status.error_message();
    return r;
  }
  r.ok = true;
  r.output = out.tokens;
  r.ttft_ms = absl::ToDoubleMilliseconds(out.token_times[0] - out.start);
  r.e2e_ms = absl::ToDoubleMilliseconds(out.token_times.back() - out.start);
  for (size_t i = 1; i < out.token_times.size(); ++i) {
    const double gap = absl::ToDoubleMilliseconds(out.token_times[i] - out.token_times[i - 1]);
    for (int t = 0; t < out.tokens_per_message[i]; ++t)
      r.itl_ms.push_back(gap / out.tokens_per_message[i]);
  }
  if (out.tokens.size() > 1) {
    r.tpot_ms = absl::ToDoubleMilliseconds(out.token_times.back() - out.token_times[0]) /
                (out.tokens.size() - 1);
  }
  r.offloaded = out.result.placement().mode() == v1::PLACEMENT_MODE_OFFLOAD &&
                !out.result.placement().fell_back_to_local();
  return r;
}

std::vector<RequestResult> RunLoad(const LoadTarget& target,
                                   const std::vector<WorkloadRequest>& workload, bool sequential,
                                   const Slos* objectives) {
  std::vector<RequestResult> results(workload.size());
  std::vector<std::unique_ptr<absl::Notification>> done;
  for (size_t i = 0; i < workload.size(); ++i)
    done.push_back(std::make_unique<absl::Notification>());
  auto run_one = [&](size_t i) {
    const WorkloadRequest& w = workload[i];
    std::vector<int32_t> prompt;
    if (w.follow_up_of >= 0) {
      done[w.follow_up_of]->WaitForNotificationWithTimeout(absl::Minutes(5));
      const RequestResult& earlier = results[w.follow_up_of];
      prompt = earlier.prompt;
      prompt.insert(prompt.end(), earlier.output.begin(), earlier.output.end());
    }
    prompt.insert(prompt.end(), w.prompt.begin(), w.prompt.end());
    client::RequestObjectives own;
    if (objectives != nullptr) {
      if (auto it = objectives->find(w.kind); it != objectives->end()) {
        own.ttft_ms = it->second.ttft_ms;
        own.tpot_ms = it->second.tpot_ms;
      }
    }
    results[i] = Send(target, std::move(prompt), w.max_tokens, w.kind, own);
    done[i]->Notify();
  };
  if (sequential) {
    for (size_t i = 0; i < workload.size(); ++i) run_one(i);
    return results;
  }
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (size_t i = 0; i < workload.size(); ++i) {
    const absl::Duration wait = start + absl::Seconds(workload[i].arrival_s) - absl::Now();
    if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
    threads.emplace_back(run_one, i);
  }
  for (auto& t : threads) t.join();
  return results;
}

nlohmann::json Percentiles(std::vector<double> v) {
  if (v.empty()) return {{"p50", 0}, {"p90", 0}, {"p99", 0}};
  return {{"p50", Percentile(v, 50)}, {"p90", Percentile(v, 90)}, {"p99", Percentile(v, 99)}};
}

nlohmann::json RatePoint(const std::vector<RequestResult>& results, const Slos& slos, double rate) {
  std::vector<double> ttft, tpot, itl, e2e;
  int ok = 0, attained = 0, errors = 0, offloaded = 0;
  std::map<std::string, int> error_counts;  // By message: what overload looks like to a client.
  for (const RequestResult& r : results) {
    if (!r.ok) {
      ++errors;
      ++error_counts[r.error.substr(0, 160)];
      continue;
    }
    ++ok;
    ttft.push_back(r.ttft_ms);
    if (r.tpot_ms > 0) tpot.push_back(r.tpot_ms);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    e2e.push_back(r.e2e_ms);
    offloaded += r.offloaded ? 1 : 0;
    const Slo& slo = slos.at(r.kind);
    if (r.ttft_ms <= slo.ttft_ms && r.tpot_ms <= slo.tpot_ms) ++attained;
  }
  return {{"rate", rate},
          {"requests", results.size()},
          {"errors", errors},
          {"error_messages", error_counts},
          {"offloaded", offloaded},
          {"attainment", results.empty() ? 0.0 : double(attained) / results.size()},
          {"ttft_ms", Percentiles(ttft)},
          {"tpot_ms", Percentiles(tpot)},
          {"itl_ms", Percentiles(itl)},
          {"e2e_ms", Percentiles(e2e)}};
}

double Goodput(const std::vector<nlohmann::json>& points) {
  std::vector<std::pair<double, double>> sweep;
  for (const auto& p : points)
    sweep.emplace_back(p["rate"].get<double>(), p["attainment"].get<double>());
  return SweepGoodput(sweep);
}

std::vector<double> GoodputPerRun(const std::vector<nlohmann::json>& points) {
  size_t runs = SIZE_MAX;
  for (const auto& p : points) {
    runs = std::min(runs, p.contains("attainment_runs") ? p["attainment_runs"].size() : size_t{0});
  }
  std::vector<double> out;
  for (size_t r = 0; runs != SIZE_MAX && r < runs; ++r) {
    std::vector<nlohmann::json> one = points;
    for (auto& p : one) p["attainment"] = p["attainment_runs"][r];
    out.push_back(Goodput(one));
  }
  return out;
}

}  // namespace pdserve::bench
