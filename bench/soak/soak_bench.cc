#include "bench/soak/soak_bench.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "bench/common/cluster_checks.h"
#include "common/process_memory.h"
#include "common/status_macros.h"
#include "common/text_table.h"
#include "pdserve/v1/decode.grpc.pb.h"
#include "tools/client/generation_client.h"
#include "tools/make_model/model_maker.h"
#include "tools/measure/report.h"
#include "tools/pdctl/cluster_launcher.h"

namespace pdserve::bench {

using measure::MachineInfo;
using measure::Progress;
using measure::WriteSummary;
namespace {

constexpr const char* kBench = "soak";
// One request of a random kind, with its outcome checked against what the kind allows.
void OneRequest(const std::shared_ptr<grpc::Channel>& channel, std::mt19937_64& rng, int vocab,
                const std::vector<int32_t>& shared_prefix, OutcomeTally* tally) {
  auto random_prompt = [&](int n) {
    std::vector<int32_t> p(n);
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    return p;
  };
  const int pick = static_cast<int>(rng() % 100);
  std::string kind;
  v1::GenerateRequest request;
  absl::Duration timeout = absl::Seconds(60);
  absl::Duration cancel_after = absl::InfiniteDuration();
  if (pick < 45) {
    kind = "chat";
    request = client::MakeRequest(random_prompt(20 + static_cast<int>(rng() % 60)),
                                  16 + static_cast<int>(rng() % 48));
  } else if (pick < 60) {
    kind = "long";
    request = client::MakeRequest(random_prompt(300 + static_cast<int>(rng() % 400)), 16);
  } else if (pick < 70) {
    kind = "follow_up";
    std::vector<int32_t> p = shared_prefix;
    const std::vector<int32_t> tail = random_prompt(10 + static_cast<int>(rng() % 30));
    p.insert(p.end(), tail.begin(), tail.end());
    request = client::MakeRequest(p, 24);
  } else if (pick < 85) {
    kind = "cancelled";
    request = client::MakeRequest(random_prompt(30 + static_cast<int>(rng() % 400)), 200);
    cancel_after = absl::Milliseconds(static_cast<int64_t>(rng() % 400));
  } else if (pick < 92) {
    kind = "short_deadline";
    request = client::MakeRequest(random_prompt(200 + static_cast<int>(rng() % 300)), 64);
    timeout = absl::Milliseconds(30 + static_cast<int64_t>(rng() % 100));
  } else {
    kind = "malformed";
    request = client::MakeRequest(random_prompt(10), 8);
    if (rng() % 2 == 0) {
      request.mutable_token_ids()->set_ids(3, static_cast<uint32_t>(vocab + 7));
    } else {
      request.mutable_sampling()->set_temperature(-1);
    }
  }
  request.mutable_sampling()->set_ignore_eos(true);
  bool cancelled = false;
  const client::GenerationOutcome out =
      client::CallGenerateCancellingAfter(channel, request, timeout, cancel_after, &cancelled);
  const grpc::StatusCode code = out.status.error_code();
  // Faults make any request liable to UNAVAILABLE (a stopped worker) or RESOURCE_EXHAUSTED.
  bool expected =
      code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::RESOURCE_EXHAUSTED;
  if (kind == "malformed") {
    expected = code == grpc::StatusCode::INVALID_ARGUMENT;
  } else if (code == grpc::StatusCode::OK) {
    expected =
        out.has_result && out.tokens.size() == static_cast<size_t>(request.sampling().max_tokens());
  } else if (kind == "cancelled") {
    expected |= code == grpc::StatusCode::CANCELLED;
  } else if (kind == "short_deadline") {
    expected |= code == grpc::StatusCode::DEADLINE_EXCEEDED;
  }
  tally->Add(kind, code, expected, out.status.error_message());
}

struct ProcessInfo {
  std::string name;
  std::string role;
  pid_t pid = 0;
  std::string grpc;
  std::string log;
  std::vector<int64_t> rss;  // Sampled once a second.
};

// Median RSS of the first and last third of the samples after the first 10 % (warm-up).
std::pair<int64_t, int64_t> RssThirds(const std::vector<int64_t>& samples) {
  const size_t skip = samples.size() / 10;
  std::vector<int64_t> v(samples.begin() + static_cast<long>(skip), samples.end());
  if (v.size() < 3) return {v.empty() ? 0 : v.front(), v.empty() ? 0 : v.back()};
  const size_t third = v.size() / 3;
  auto median = [](std::vector<int64_t> part) {
    std::sort(part.begin(), part.end());
    return part[part.size() / 2];
  };
  return {median(std::vector<int64_t>(v.begin(), v.begin() + static_cast<long>(third))),
          median(std::vector<int64_t>(v.end() - static_cast<long>(third), v.end()))};
}

// A client that stops reading its stream for a while, then leaves.
void SlowConsumer(const std::shared_ptr<grpc::Channel>& channel, absl::Duration stall) {
  auto stub = v1::Generation::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + stall + absl::Seconds(30)));
  v1::GenerateRequest r = client::MakeRequest({1, 2, 3, 4, 5, 6}, 3000);
  r.mutable_sampling()->set_ignore_eos(true);
  auto reader = stub->Generate(&ctx, r);
  v1::GenerateResponse first;
  reader->Read(&first);
  absl::SleepFor(stall);
  ctx.TryCancel();
  v1::GenerateResponse rest;
  while (reader->Read(&rest)) {
  }
  reader->Finish().IgnoreError();
}

}  // namespace

absl::Status RunSoakBench(const SoakBenchConfig& cfg) {
  if (cfg.out_dir.empty()) return absl::InvalidArgumentError("--out: required");
  if (cfg.duration < absl::Seconds(10))
    return absl::InvalidArgumentError("--duration: must be >= 10s");
  if (cfg.clients < 1) return absl::InvalidArgumentError("--clients: must be >= 1");
  std::string dir = cfg.model_dir;
  if (dir.empty()) {
    dir = "models/tiny";
    ASSIGN_OR_RETURN(tools::ModelSpec spec, tools::ModelSpec::Preset("tiny"));
    RETURN_IF_ERROR(tools::EnsureModel(spec, dir));
  }
  auto vocab_json = nlohmann::json::parse(ReadTextFile(dir + "/config.json"), nullptr, false);
  if (vocab_json.is_discarded() || !vocab_json.contains("vocab_size")) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/config.json: no vocab_size"));
  }
  const int vocab = vocab_json["vocab_size"].get<int>();

  pdctl::ClusterConfig c;
  c.run_dir = cfg.out_dir + "/cluster";
  c.model_dir = dir;
  c.router_listen = "127.0.0.1:0";
  c.policy = "length_threshold";
  c.router.name = "router";
  c.router.flags = {"--length_threshold=256", "--log_level=warning"};
  auto worker = [](const std::string& name, std::vector<std::string> flags) {
    pdctl::ProcessSpec p;
    p.name = name;
    p.flags = std::move(flags);
    p.flags.push_back("--log_level=warning");
    return p;
  };
  // Small pools: preemption and admission limits are part of the soak.
  c.decode = {worker("decode-0", {"--num_blocks=400", "--max_client_stall=2s"}),
              worker("decode-1", {"--num_blocks=400", "--max_client_stall=2s"})};
  c.prefill = {worker("prefill-0", {})};
  Progress(kBench, "starting the cluster");
  ASSIGN_OR_RETURN(pdctl::LaunchedCluster cluster, pdctl::LaunchCluster(c, false));
  std::vector<ProcessInfo> processes;
  for (const pdctl::ProcessState& p : cluster.state.processes) {
    processes.push_back(ProcessInfo{p.name, p.role, p.pid, p.grpc, p.log, {}});
  }
  auto channel = client::MakeChannel(cluster.state.router, GrpcSecurity());

  std::atomic<bool> stop{false};
  absl::Mutex rss_mu;
  std::thread sampler([&] {
    while (!stop.load()) {
      {
        absl::MutexLock lock(&rss_mu);
        for (ProcessInfo& p : processes) p.rss.push_back(ResidentSetBytes(p.pid));
      }
      absl::SleepFor(absl::Seconds(1));
    }
  });
  OutcomeTally tally;
  std::vector<int32_t> shared_prefix(200);
  {
    std::mt19937_64 rng(cfg.seed);
    for (int32_t& t : shared_prefix) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  }
  std::vector<std::thread> clients;
  for (int i = 0; i < cfg.clients; ++i) {
    clients.emplace_back([&, i] {
      std::mt19937_64 rng(cfg.seed * 1000 + static_cast<uint64_t>(i));
      while (!stop.load()) OneRequest(channel, rng, vocab, shared_prefix, &tally);
    });
  }
  // Faults, in turn.
  std::vector<std::string> faults;
  auto pid_of = [&](const std::string& name) {
    for (const ProcessInfo& p : processes) {
      if (p.name == name) return p.pid;
    }
    return pid_t{0};
  };
  const absl::Time end = absl::Now() + cfg.duration;
  int round = 0;
  while (absl::Now() + cfg.fault_interval < end) {
    absl::SleepFor(cfg.fault_interval);
    switch (round++ % 4) {
      case 0:
        faults.push_back("prefill stopped 3 s");
        kill(pid_of("prefill-0"), SIGSTOP);
        absl::SleepFor(absl::Seconds(3));
        kill(pid_of("prefill-0"), SIGCONT);
        break;
      case 1:
        faults.push_back("decode-1 stopped 1 s");
        kill(pid_of("decode-1"), SIGSTOP);
        absl::SleepFor(absl::Seconds(1));
        kill(pid_of("decode-1"), SIGCONT);
        break;
      case 2:
        faults.push_back("slow consumer 4 s");
        SlowConsumer(channel, absl::Seconds(4));
        break;
      default: {
        faults.push_back("cancellation storm of 30");
        std::vector<std::thread> storm;
        for (int i = 0; i < 30; ++i) {
          storm.emplace_back([&, i] {
            bool cancelled = false;
            client::CallGenerateCancellingAfter(
                channel, client::MakeRequest({1, 2, static_cast<int32_t>(3 + i)}, 500),
                absl::Seconds(30), absl::Milliseconds(20 + 5 * i), &cancelled);
          });
        }
        for (auto& t : storm) t.join();
        break;
      }
    }
    Progress(kBench, absl::StrCat("fault: ", faults.back()));
  }
  while (absl::Now() < end) absl::SleepFor(absl::Milliseconds(100));
  stop = true;
  for (auto& t : clients) t.join();
  sampler.join();

  // Back at baseline?
  Progress(kBench, "traffic stopped; waiting for baseline");
  bool baseline = false;
  uint32_t in_flight = UINT32_MAX;
  std::vector<v1::DecodeStats> decode_stats;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!baseline && absl::Now() < deadline) {
    decode_stats.clear();
    baseline = true;
    for (const ProcessInfo& p : processes) {
      if (p.role != "decode") continue;
      decode_stats.push_back(FetchDecodeStats(p.grpc));
      baseline &= client::AtBaseline(decode_stats.back());
    }
    auto status = pdctl::FetchClusterStatus(cluster.state.router, 0, GrpcSecurity());
    in_flight = status.ok() ? status->in_flight() : UINT32_MAX;
    baseline &= in_flight == 0;
    if (!baseline) absl::SleepFor(absl::Milliseconds(100));
  }
  // Processes up, logs clean, memory flat.
  Table table(
      {"process", "alive", "log clean", "RSS first third MiB", "RSS last third MiB", "flat"});
  nlohmann::json process_json = nlohmann::json::array();
  bool all_alive = true;
  bool all_clean = true;
  bool all_flat = true;
  for (const ProcessInfo& p : processes) {
    const bool alive = kill(p.pid, 0) == 0;
    const std::vector<std::string> reports = BrokenProcessReports(ReadTextFile(p.log));
    const auto [first, last] = RssThirds(p.rss);
    const bool flat = last <= std::max<int64_t>(first * 11 / 10, first + (int64_t{16} << 20));
    all_alive &= alive;
    all_clean &= reports.empty();
    all_flat &= flat;
    table.AddRow({p.name, alive ? "yes" : "NO", reports.empty() ? "yes" : "NO",
                  Fixed(first / 1048576.0, 1), Fixed(last / 1048576.0, 1), flat ? "yes" : "NO"});
    process_json.push_back({{"name", p.name},
                            {"alive", alive},
                            {"reports", reports},
                            {"rss_samples", p.rss},
                            {"rss_first_third", first},
                            {"rss_last_third", last},
                            {"flat", flat}});
  }
  const nlohmann::json outcomes = tally.ToJson();
  const Table requests = tally.ToTable();
  const int total = tally.total();
  nlohmann::json decode_json = nlohmann::json::array();
  for (const v1::DecodeStats& s : decode_stats) decode_json.push_back(DecodeStatsJson(s));
  const bool passed =
      baseline && all_alive && all_clean && all_flat && tally.unexpected() == 0 && total > 0;
  nlohmann::json summary = {{"bench", "soak"},
                            {"machine", MachineInfo()},
                            {"duration_s", absl::ToDoubleSeconds(cfg.duration)},
                            {"clients", cfg.clients},
                            {"requests", total},
                            {"outcomes", outcomes},
                            {"faults", faults},
                            {"baseline", baseline},
                            {"router_in_flight", in_flight},
                            {"decode_workers", decode_json},
                            {"processes", process_json},
                            {"passed", passed}};
  RETURN_IF_ERROR(WriteSummary(cfg.out_dir, summary));
  std::printf("%s\n%s\nfaults: %zu injected; baseline: %s; unexpected outcomes: %d; %s\n",
              requests.ToString().c_str(), table.ToString().c_str(), faults.size(),
              baseline ? "yes" : "NO", tally.unexpected(), passed ? "PASSED" : "FAILED");
  if (!passed) {
    return absl::FailedPreconditionError(
        absl::StrCat("soak failed: baseline=", baseline, " alive=", all_alive, " clean=", all_clean,
                     " flat=", all_flat, " unexpected=", outcomes["examples"].dump()));
  }
  return absl::OkStatus();
}

}  // namespace pdserve::bench
