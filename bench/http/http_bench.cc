#include "bench/http/http_bench.h"

#include <poll.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/model_config.h"
#include "common/process_memory.h"
#include "common/status_macros.h"
#include "server/grpc_security.h"
#include "tools/client/generation_client.h"
#include "tools/client/http_connection.h"
#include "tools/client/openai_stream.h"
#include "tools/make_model/model_maker.h"
#include "tools/measure/bench_model.h"
#include "tools/measure/report.h"
#include "tools/pdctl/cluster_launcher.h"

namespace pdserve::bench {

using measure::BenchModel;
using measure::LoadBenchModel;
using measure::MachineInfo;
using measure::Median;
using measure::Percentile;
using measure::Progress;
using measure::WriteSummary;
namespace {

constexpr char kBench[] = "http";

struct Sample {
  bool ok = false;
  std::string error;
  double ttft_ms = 0;
  std::vector<double> gaps_ms;  // Between consecutive events (messages) that carried text.
};

Sample FromTimes(absl::Time start, const std::vector<absl::Time>& times) {
  Sample s;
  if (times.empty()) {
    s.error = "no text";
    return s;
  }
  s.ok = true;
  s.ttft_ms = absl::ToDoubleMilliseconds(times[0] - start);
  for (size_t i = 1; i < times.size(); ++i)
    s.gaps_ms.push_back(absl::ToDoubleMilliseconds(times[i] - times[i - 1]));
  return s;
}

Sample GrpcSample(const std::shared_ptr<grpc::Channel>& channel, const std::vector<int32_t>& prompt,
                  int max_tokens) {
  v1::GenerateRequest request = client::MakeRequest(prompt, max_tokens);
  request.mutable_sampling()->set_ignore_eos(true);
  std::vector<absl::Time> times;  // Stamped as the HTTP client stamps its events.
  const client::GenerationOutcome out = client::CallGenerate(
      channel, request, absl::Seconds(120), [&](const v1::GenerateResponse& message) {
        if (!message.text().empty()) times.push_back(absl::Now());
      });
  if (!out.status.ok()) return Sample{false, out.status.error_message()};
  return FromTimes(out.start, times);
}

Sample HttpSample(const std::string& address, const std::vector<int32_t>& prompt, int max_tokens) {
  const client::OpenAiStreamOutcome out = client::StreamCompletion(
      address, prompt, max_tokens, /*ignore_eos=*/true, absl::Seconds(120));
  if (!out.ok()) return Sample{false, absl::StrCat(out.http_status, " ", out.error)};
  return FromTimes(out.start, out.event_times);
}

std::vector<int32_t> RandomPrompt(std::mt19937_64& rng, int tokens, int vocab) {
  std::uniform_int_distribution<int32_t> token(16, vocab - 1);
  std::vector<int32_t> prompt(tokens);
  for (int32_t& t : prompt) t = token(rng);
  return prompt;
}

pdctl::ClusterConfig ClusterFor(const HttpBenchConfig& cfg, const std::string& model_dir,
                                const std::string& name, bool one_slot) {
  pdctl::ClusterConfig c;
  c.run_dir = absl::StrCat(cfg.out_dir, "/cluster/", name);
  c.model_dir = model_dir;
  c.router_listen = "127.0.0.1:0";
  c.router_metrics_listen = "127.0.0.1:0";
  c.router_http_listen = "127.0.0.1:0";
  c.policy = "always_local";
  c.router.name = "router";
  c.router.flags = {"--log_level=warning", "--max_waiting_per_worker=8192",
                    "--http_max_connections=20000"};
  if (!cfg.cpus.empty()) c.router.cpus = {cfg.cpus[0]};
  pdctl::ProcessSpec decode;
  decode.name = "decode-0";
  decode.threads = 1;
  if (!cfg.cpus.empty()) decode.cpus = {cfg.cpus[cfg.cpus.size() > 1 ? 1 : 0]};
  decode.flags = {"--log_level=warning", "--max_waiting=8192"};
  if (one_slot) decode.flags.push_back("--max_num_seqs=1");
  c.decode = {decode};
  return c;
}

struct RatioStats {
  double median = 0, min = 0, max = 0;
  nlohmann::json ToJson() const { return {{"median", median}, {"min", min}, {"max", max}}; }
};
RatioStats Stats(const std::vector<double>& v) {
  RatioStats s;
  if (v.empty()) return s;
  s.median = Median(v);
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}

// One run of alternating requests; per-API medians and their ratios.
absl::StatusOr<nlohmann::json> OverheadRun(const HttpBenchConfig& cfg, int run,
                                           const std::shared_ptr<grpc::Channel>& channel,
                                           const std::string& http, int vocab) {
  std::mt19937_64 rng(cfg.seed + static_cast<uint64_t>(run));
  std::vector<double> ttft[2], gaps[2];  // [0] gRPC, [1] HTTP.
  int failures = 0;
  std::string last_error;
  for (int i = 0; i < cfg.requests; ++i) {
    const int first = static_cast<int>(rng() & 1);
    for (int k = 0; k < 2; ++k) {
      const int api = k ^ first;
      const std::vector<int32_t> prompt = RandomPrompt(rng, cfg.prompt_tokens, vocab);
      const Sample s = api == 0 ? GrpcSample(channel, prompt, cfg.max_tokens)
                                : HttpSample(http, prompt, cfg.max_tokens);
      if (!s.ok) {
        ++failures;
        last_error = s.error;
        continue;
      }
      ttft[api].push_back(s.ttft_ms);
      gaps[api].insert(gaps[api].end(), s.gaps_ms.begin(), s.gaps_ms.end());
    }
  }
  if (failures > 0 || ttft[0].empty() || ttft[1].empty() || gaps[0].empty() || gaps[1].empty()) {
    return absl::InternalError(
        absl::StrCat("run ", run, ": ", failures, " failed requests (", last_error, ")"));
  }
  nlohmann::json j;
  j["requests_per_api"] = cfg.requests;
  for (int api = 0; api < 2; ++api) {
    const char* name = api == 0 ? "grpc" : "http";
    j[name] = {{"ttft_ms_p50", Median(ttft[api])},
               {"ttft_ms_p90", Percentile(ttft[api], 90)},
               {"itl_ms_p50", Median(gaps[api])},
               {"itl_ms_p90", Percentile(gaps[api], 90)},
               {"events", gaps[api].size() + ttft[api].size()}};
  }
  j["ttft_ratio_p50"] = Median(ttft[1]) / Median(ttft[0]);
  j["ttft_ratio_p90"] = Percentile(ttft[1], 90) / Percentile(ttft[0], 90);
  j["itl_ratio_p50"] = Median(gaps[1]) / Median(gaps[0]);
  j["itl_ratio_p90"] = Percentile(gaps[1], 90) / Percentile(gaps[0], 90);
  return j;
}

// A gRPC Generate call held open without a thread: the same waiting request over the gRPC API.
// Destroying it cancels the call and waits for gRPC to be done with it (the reactor must
// outlive OnDone), so an early return cannot leave gRPC writing into freed memory.
class HeldGrpcCall final : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  HeldGrpcCall(v1::Generation::Stub* stub, v1::GenerateRequest request)
      : request_(std::move(request)) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
    stub->async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }
  ~HeldGrpcCall() override {
    context_.TryCancel();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
  }
  void OnReadDone(bool ok) override {
    if (ok) StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    ok_ = status.ok();
    done_ = true;
  }
  bool WaitDone(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&done_), timeout) && ok_;
  }

 private:
  grpc::ClientContext context_;
  v1::GenerateRequest request_;
  v1::GenerateResponse response_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool ok_ ABSL_GUARDED_BY(mu_) = false;
};

// N streaming requests wait in the decode worker's queue over N open HTTP connections (or, with
// `grpc`, N gRPC calls on one channel).
absl::StatusOr<nlohmann::json> HeldStreams(const HttpBenchConfig& cfg, const std::string& model_dir,
                                           int vocab, int context, int run, bool grpc) {
  ASSIGN_OR_RETURN(
      pdctl::LaunchedCluster cluster,
      pdctl::LaunchCluster(
          ClusterFor(cfg, model_dir, absl::StrCat(grpc ? "held-grpc-" : "held-", run), true),
          false));
  const pid_t router_pid = cluster.state.processes[0].pid;
  auto channel = client::MakeChannel(cluster.state.router, GrpcSecurity());
  // The one running slot: a stream far longer than this part.
  client::CallHandle hog_handle;
  absl::Notification hog_started;
  std::thread hog([&] {
    v1::GenerateRequest r = client::MakeRequest({20, 21, 22, 23}, context - 8);
    r.mutable_sampling()->set_ignore_eos(true);
    client::CallGenerate(
        channel, r, absl::Minutes(30),
        [&](const v1::GenerateResponse&) {
          if (!hog_started.HasBeenNotified()) hog_started.Notify();
        },
        &hog_handle);
  });
  struct HogStopper {
    client::CallHandle* handle;
    std::thread* thread;
    ~HogStopper() {
      handle->Cancel();
      if (thread->joinable()) thread->join();
    }
  } stopper{&hog_handle, &hog};
  if (!hog_started.WaitForNotificationWithTimeout(absl::Seconds(60)))
    return absl::DeadlineExceededError("the long stream did not start");
  absl::SleepFor(absl::Seconds(1));
  const int64_t rss_before = ResidentSetBytes(router_pid);
  std::mt19937_64 rng(cfg.seed ^ 0x1d1e);
  std::vector<std::unique_ptr<client::HttpConnection>> connections;
  std::vector<std::unique_ptr<HeldGrpcCall>> calls;
  auto stub = v1::Generation::NewStub(channel);
  for (int i = 0; grpc && i < cfg.idle_connections; ++i) {
    v1::GenerateRequest r = client::MakeRequest(RandomPrompt(rng, 8, vocab), 1);
    calls.push_back(std::make_unique<HeldGrpcCall>(stub.get(), std::move(r)));
  }
  for (int i = 0; !grpc && i < cfg.idle_connections; ++i) {
    auto c = client::HttpConnection::Open(cluster.state.router_http);
    if (!c.ok())
      return absl::UnavailableError(absl::StrCat("connection ", i, ": ", c.status().message()));
    nlohmann::json body = {{"prompt", RandomPrompt(rng, 8, vocab)},
                           {"max_tokens", 1},
                           {"stream", true},
                           {"temperature", 0}};
    RETURN_IF_ERROR(
        (*c)->Send(client::HttpRequestBytes("POST", "/v1/completions", body.dump(), "", false)));
    connections.push_back(*std::move(c));
  }
  // Every request admitted and waiting (router in-flight = N + the long stream).
  const absl::Time wait_until = absl::Now() + absl::Seconds(120);
  uint32_t in_flight = 0;
  while (absl::Now() < wait_until) {
    auto status = pdctl::FetchClusterStatus(cluster.state.router, 0, GrpcSecurity());
    if (status.ok()) in_flight = status->in_flight();
    if (in_flight >= static_cast<uint32_t>(cfg.idle_connections + 1)) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  if (in_flight < static_cast<uint32_t>(cfg.idle_connections + 1))
    return absl::DeadlineExceededError(absl::StrCat("only ", in_flight, " requests in flight"));
  absl::SleepFor(absl::Seconds(1));
  const int64_t rss_held = ResidentSetBytes(router_pid);
  // Free the slot: every waiting request must now complete.
  hog_handle.Cancel();
  hog.join();
  int completed = 0;
  for (auto& call : calls) completed += call->WaitDone(absl::Seconds(300)) ? 1 : 0;
  std::vector<bool> finished(connections.size(), false);
  const absl::Time deadline = absl::Now() + absl::Seconds(300);
  while (completed < static_cast<int>(connections.size()) && absl::Now() < deadline) {
    std::vector<pollfd> fds;
    std::vector<size_t> which;
    for (size_t i = 0; i < connections.size(); ++i) {
      if (finished[i]) continue;
      fds.push_back(pollfd{connections[i]->fd(), POLLIN, 0});
      which.push_back(i);
    }
    if (::poll(fds.data(), fds.size(), 200) <= 0) continue;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      client::HttpConnection& c = *connections[which[k]];
      c.ReadAvailable();
      if (absl::StrContains(c.received(), "data: [DONE]") || c.peer_closed()) {
        finished[which[k]] = true;
        if (absl::StrContains(c.received(), "data: [DONE]")) ++completed;
      }
    }
  }
  const double per_stream = static_cast<double>(rss_held - rss_before) / cfg.idle_connections;
  Progress(kBench, absl::StrCat("run ", run + 1, ": ", cfg.idle_connections,
                                grpc ? " waiting gRPC streams" : " waiting SSE streams",
                                ": router RSS ", rss_before >> 20, " -> ", rss_held >> 20, " MiB (",
                                Fixed(per_stream / 1024, 1), " KiB each); ", completed,
                                " completed once released"));
  return nlohmann::json{{"connections", cfg.idle_connections},
                        {"router_rss_before_bytes", rss_before},
                        {"router_rss_held_bytes", rss_held},
                        {"bytes_per_waiting_stream", per_stream},
                        {"completed_after_release", completed}};
}

// N open keep-alive connections without a request: the HTTP connection's own share.
absl::StatusOr<nlohmann::json> IdleConnections(const HttpBenchConfig& cfg,
                                               const std::string& model_dir, int run) {
  ASSIGN_OR_RETURN(
      pdctl::LaunchedCluster cluster,
      pdctl::LaunchCluster(ClusterFor(cfg, model_dir, absl::StrCat("idle-", run), false), false));
  const pid_t router_pid = cluster.state.processes[0].pid;
  absl::SleepFor(absl::Seconds(1));
  const int64_t rss_before = ResidentSetBytes(router_pid);
  std::vector<std::unique_ptr<client::HttpConnection>> connections;
  for (int i = 0; i < cfg.idle_connections; ++i) {
    auto c = client::HttpConnection::Open(cluster.state.router_http);
    if (!c.ok()) return c.status();
    connections.push_back(*std::move(c));
  }
  absl::SleepFor(absl::Seconds(2));  // Accepted and parked in their first read.
  const int64_t rss_held = ResidentSetBytes(router_pid);
  return nlohmann::json{{"connections", cfg.idle_connections},
                        {"bytes_per_keepalive_connection",
                         static_cast<double>(rss_held - rss_before) / cfg.idle_connections}};
}

}  // namespace

absl::Status RunHttpBench(const HttpBenchConfig& cfg) {
  if (cfg.out_dir.empty()) return absl::InvalidArgumentError("--out: required");
  if (cfg.runs < 1 || cfg.requests < 4)
    return absl::InvalidArgumentError("--runs >= 1 and --requests >= 4");
  ASSIGN_OR_RETURN(const BenchModel loaded, LoadBenchModel(cfg.model_dir, "tiny", "http"));
  const std::string& dir = loaded.dir;
  const ModelConfig& model = loaded.config;
  std::filesystem::create_directories(cfg.out_dir);
  // Thousands of sockets here and in the router (which inherits the limit).
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  if (cfg.idle_connections > 0 &&
      limit.rlim_cur < static_cast<rlim_t>(cfg.idle_connections) + 512) {
    return absl::FailedPreconditionError(
        absl::StrCat("--idle_connections=", cfg.idle_connections,
                     " needs that many file descriptors; the limit is ", limit.rlim_cur));
  }

  nlohmann::json summary;
  summary["machine"] = MachineInfo();
  summary["config"] = {{"runs", cfg.runs},
                       {"requests_per_api", cfg.requests},
                       {"prompt_tokens", cfg.prompt_tokens},
                       {"max_tokens", cfg.max_tokens},
                       {"idle_connections", cfg.idle_connections},
                       {"model", dir}};
  Table table({"run", "TTFT p50 gRPC ms", "TTFT p50 HTTP ms", "TTFT ratio", "ITL p50 gRPC ms",
               "ITL p50 HTTP ms", "ITL ratio", "ITL p90 ratio"});
  std::vector<double> ttft_ratios, itl_ratios, itl_p90_ratios;
  {
    Progress(kBench,
             "starting the overhead cluster (router with --http_listen, one decode worker)");
    ASSIGN_OR_RETURN(pdctl::LaunchedCluster cluster,
                     pdctl::LaunchCluster(ClusterFor(cfg, dir, "overhead", false), false));
    auto channel = client::MakeChannel(cluster.state.router, GrpcSecurity());
    for (int i = 0; i < 10; ++i) {  // Warm both paths.
      std::mt19937_64 rng(i);
      GrpcSample(channel, RandomPrompt(rng, cfg.prompt_tokens, model.vocab_size), cfg.max_tokens);
      HttpSample(cluster.state.router_http, RandomPrompt(rng, cfg.prompt_tokens, model.vocab_size),
                 cfg.max_tokens);
    }
    for (int run = 0; run < cfg.runs; ++run) {
      ASSIGN_OR_RETURN(nlohmann::json r,
                       OverheadRun(cfg, run, channel, cluster.state.router_http, model.vocab_size));
      ttft_ratios.push_back(r["ttft_ratio_p50"]);
      itl_ratios.push_back(r["itl_ratio_p50"]);
      itl_p90_ratios.push_back(r["itl_ratio_p90"]);
      table.AddRow({absl::StrCat(run + 1), Fixed(r["grpc"]["ttft_ms_p50"].get<double>(), 3),
                    Fixed(r["http"]["ttft_ms_p50"].get<double>(), 3), Fixed(r["ttft_ratio_p50"], 3),
                    Fixed(r["grpc"]["itl_ms_p50"], 3), Fixed(r["http"]["itl_ms_p50"], 3),
                    Fixed(r["itl_ratio_p50"], 3), Fixed(r["itl_ratio_p90"], 3)});
      Progress(kBench, absl::StrCat("run ", run + 1, ": TTFT ratio ", Fixed(r["ttft_ratio_p50"], 3),
                                    ", ITL ratio ", Fixed(r["itl_ratio_p50"], 3)));
      summary["runs"].push_back(r);
    }
  }
  const RatioStats ttft = Stats(ttft_ratios), itl = Stats(itl_ratios),
                   itl90 = Stats(itl_p90_ratios);
  summary["http_ttft_overhead_ratio"] = ttft.ToJson();
  summary["http_itl_overhead_ratio"] = itl.ToJson();
  summary["http_itl_p90_overhead_ratio"] = itl90.ToJson();
  table.AddRow(
      {"median [min, max]", "", "",
       absl::StrCat(Fixed(ttft.median, 3), " [", Fixed(ttft.min, 3), ", ", Fixed(ttft.max, 3), "]"),
       "", "",
       absl::StrCat(Fixed(itl.median, 3), " [", Fixed(itl.min, 3), ", ", Fixed(itl.max, 3), "]"),
       Fixed(itl90.median, 3)});

  Table memory({"run", "held streams", "completed after release",
                "router bytes / waiting SSE stream", "router bytes / waiting gRPC stream",
                "router bytes / idle keep-alive connection"});
  if (cfg.idle_connections > 0) {
    std::vector<double> per_stream, per_grpc_stream, per_connection;
    for (int run = 0; run < cfg.runs; ++run) {
      ASSIGN_OR_RETURN(nlohmann::json held, HeldStreams(cfg, dir, model.vocab_size,
                                                        model.max_position_embeddings, run, false));
      ASSIGN_OR_RETURN(
          nlohmann::json held_grpc,
          HeldStreams(cfg, dir, model.vocab_size, model.max_position_embeddings, run, true));
      ASSIGN_OR_RETURN(nlohmann::json idle, IdleConnections(cfg, dir, run));
      per_stream.push_back(held["bytes_per_waiting_stream"]);
      per_grpc_stream.push_back(held_grpc["bytes_per_waiting_stream"]);
      per_connection.push_back(idle["bytes_per_keepalive_connection"]);
      memory.AddRow({absl::StrCat(run + 1), absl::StrCat(cfg.idle_connections),
                     absl::StrCat(held["completed_after_release"].get<int>(), " + ",
                                  held_grpc["completed_after_release"].get<int>()),
                     Fixed(held["bytes_per_waiting_stream"].get<double>(), 0),
                     Fixed(held_grpc["bytes_per_waiting_stream"].get<double>(), 0),
                     Fixed(idle["bytes_per_keepalive_connection"].get<double>(), 0)});
      summary["held_streams"].push_back(held);
      summary["held_grpc_streams"].push_back(held_grpc);
      summary["idle_connections"].push_back(idle);
      for (const nlohmann::json* h : {&held, &held_grpc}) {
        if ((*h)["completed_after_release"].get<int>() != cfg.idle_connections) {
          return absl::InternalError(absl::StrCat((*h)["completed_after_release"].get<int>(),
                                                  " of ", cfg.idle_connections,
                                                  " held streams completed"));
        }
      }
    }
    summary["http_bytes_per_waiting_stream"] = Stats(per_stream).ToJson();
    summary["grpc_bytes_per_waiting_stream"] = Stats(per_grpc_stream).ToJson();
    summary["http_bytes_per_keepalive_connection"] = Stats(per_connection).ToJson();
  }
  std::printf(
      "pdserve-bench http: the OpenAI-compatible front against gRPC on one cluster "
      "(HTTP/gRPC ratios of medians; %d requests per API per run, alternating)\n%s\n",
      cfg.requests, table.ToString().c_str());
  if (cfg.idle_connections > 0) std::printf("\n%s\n", memory.ToString().c_str());
  return WriteSummary(cfg.out_dir, summary);
}

}  // namespace pdserve::bench
