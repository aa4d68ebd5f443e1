#include "bench/router/relay_measure.h"

#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/client/generation_client.h"
#include "tools/measure/report.h"

namespace pdserve::bench {

using measure::Mean;
using measure::Median;
using measure::Progress;
namespace {

struct StreamTimes {
  std::vector<double> itl_ms;  // Per token.
  std::vector<double> ttft_ms;
};

void Collect(const client::GenerationOutcome& out, StreamTimes* times) {
  if (out.token_times.empty()) return;
  times->ttft_ms.push_back(absl::ToDoubleMilliseconds(out.token_times[0] - out.start));
  for (size_t i = 1; i < out.token_times.size(); ++i) {
    const double gap = absl::ToDoubleMilliseconds(out.token_times[i] - out.token_times[i - 1]);
    times->itl_ms.push_back(gap / std::max(1, out.tokens_per_message[i]));
  }
}

}  // namespace

absl::StatusOr<RelayResult> MeasureRelay(const std::shared_ptr<grpc::Channel>& router,
                                         const std::shared_ptr<grpc::Channel>& decode,
                                         const RelayConfig& config) {
  std::mt19937 rng(99);
  StreamTimes through_router;
  StreamTimes direct;
  for (int round = 0; round < config.rounds; ++round) {
    for (int pass = 0; pass < 2; ++pass) {
      // Alternate which goes first, so that drift hits both alike.
      const bool via_router = (round + pass) % 2 == 0;
      std::vector<client::GenerationOutcome> outs(config.streams);
      std::vector<std::thread> threads;
      for (int s = 0; s < config.streams; ++s) {
        std::vector<int32_t> prompt(64);
        for (auto& t : prompt)
          t = static_cast<int32_t>(rng() % static_cast<uint32_t>(config.vocab));
        threads.emplace_back([&, s, prompt] {
          v1::GenerateRequest request = client::MakeRequest(prompt, config.tokens);
          request.mutable_sampling()->set_ignore_eos(true);
          if (via_router) {
            outs[s] = client::CallGenerate(router, request, absl::Minutes(5));
          } else {
            v1::DecodeRequest d;
            *d.mutable_request() = request;
            outs[s] = client::CallDecode(decode, d, absl::Minutes(5));
          }
        });
      }
      for (auto& t : threads) t.join();
      for (const auto& out : outs) {
        if (!out.status.ok())
          return absl::InternalError(absl::StrCat("relay stream: ", out.status.error_message()));
        Collect(out, via_router ? &through_router : &direct);
      }
    }
    Progress("relay", absl::StrCat("round ", round + 1, "/", config.rounds));
  }
  // TTFT one request at a time: concurrent arrivals would measure which engine step each
  // request happened to join, not the relay.
  std::vector<double> ttft_router_ms;
  std::vector<double> ttft_direct_ms;
  for (int i = 0; i < 2 * config.ttft_requests; ++i) {
    std::vector<int32_t> prompt(64);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(config.vocab));
    v1::GenerateRequest request = client::MakeRequest(prompt, 1);
    client::GenerationOutcome out;
    if (i % 2 == 0) {
      out = client::CallGenerate(router, request, absl::Minutes(1));
    } else {
      v1::DecodeRequest d;
      *d.mutable_request() = request;
      out = client::CallDecode(decode, d, absl::Minutes(1));
    }
    if (!out.status.ok() || out.token_times.empty()) {
      return absl::InternalError(absl::StrCat("ttft request: ", out.status.error_message()));
    }
    (i % 2 == 0 ? ttft_router_ms : ttft_direct_ms)
        .push_back(absl::ToDoubleMilliseconds(out.token_times[0] - out.start));
  }
  RelayResult r;
  r.itl_ms_router = Mean(through_router.itl_ms);
  r.itl_ms_direct = Mean(direct.itl_ms);
  r.itl_p50_ms_router = Median(through_router.itl_ms);
  r.itl_p50_ms_direct = Median(direct.itl_ms);
  r.ttft_ms_router = Median(ttft_router_ms);
  r.ttft_ms_direct = Median(ttft_direct_ms);
  return r;
}

}  // namespace pdserve::bench
