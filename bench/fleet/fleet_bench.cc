#include "bench/fleet/fleet_bench.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/router/relay_measure.h"
#include "common/process_memory.h"
#include "common/status_macros.h"
#include "common/text_table.h"
#include "pdserve/v1/registry.grpc.pb.h"
#include "server/child_process.h"
#include "server/grpc_channel.h"
#include "tools/client/generation_client.h"
#include "tools/make_model/model_maker.h"
#include "tools/measure/cpu_pinning.h"
#include "tools/measure/report.h"

namespace pdserve::bench {

using measure::MachineInfo;
using measure::Median;
using measure::Percentile;
using measure::Progress;
using measure::WriteSummary;
namespace {

// CPU seconds (user + system) a process has used and its resident memory, from /proc.
struct ProcessSample {
  double cpu_s = 0;
  double rss_mb = 0;
};

absl::StatusOr<ProcessSample> SampleProcess(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return absl::NotFoundError(absl::StrCat("no process ", pid));
  // Fields after the command (which may hold spaces) start after its closing parenthesis.
  const std::vector<std::string> f = absl::StrSplit(line.substr(line.rfind(')') + 2), ' ');
  ProcessSample s;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  s.cpu_s = (std::stod(f[11]) + std::stod(f[12])) / tick;  // utime, stime (fields 14, 15).
  s.rss_mb = static_cast<double>(ResidentSetBytes(pid)) / (1024 * 1024);
  return s;
}

absl::StatusOr<v1::ClusterStatus> Status(const std::string& address, uint32_t decisions) {
  auto stub = v1::Registry::NewStub(client::MakeChannel(address, GrpcSecurity()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::ClusterStatusRequest request;
  request.set_max_decisions(decisions);
  v1::ClusterStatus status;
  const grpc::Status s = stub->GetClusterStatus(&ctx, request, &status);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("cluster status: ", s.error_message()));
  return status;
}

int Registered(const v1::ClusterStatus& s) {
  int n = 0;
  for (const v1::WorkerStatus& w : s.workers())
    n += w.registration().role() == v1::WORKER_ROLE_DECODE;
  return n;
}

}  // namespace

absl::Status RunFleetBench(const FleetBenchConfig& cfg) {
  if (cfg.out_dir.empty()) return absl::InvalidArgumentError("--out: required");
  if (cfg.decode_workers < 2 || cfg.decode_workers > 1024)
    return absl::InvalidArgumentError("--workers: must be in [2, 1024]");
  std::string dir = cfg.model_dir;
  if (dir.empty()) {
    dir = "models/llama3-8b-emulated";
    ASSIGN_OR_RETURN(tools::ModelSpec spec, tools::ModelSpec::Preset("8b"));
    spec.weights = false;
    spec.max_position_embeddings = 131072;
    RETURN_IF_ERROR(tools::EnsureModel(spec, dir));
  }
  // The load generator (this thread and all it starts) runs beside the workers.
  RETURN_IF_ERROR(measure::PinThisThread("cpus", cfg.worker_cpus));
  nlohmann::json summary;
  summary["machine"] = MachineInfo();
  summary["router_cpus"] = cfg.router_cpus;
  summary["worker_cpus"] = cfg.worker_cpus;
  summary["workers"] = cfg.decode_workers;
  summary["profile"] = cfg.profile;
  Table table({"measurement", "value"});
  auto cpu_list = [](const std::vector<int>& cpus) {
    return cpus.empty() ? std::string("any") : absl::StrJoin(cpus, ",");
  };
  table.AddRow({"CPUs: router; workers and load generator",
                absl::StrCat(cpu_list(cfg.router_cpus), "; ", cpu_list(cfg.worker_cpus))});

  ASSIGN_OR_RETURN(
      auto router,
      ChildProcess::Start(ChildOptions{
          .binary = "pdserve-router",
          .args = {"--model=" + dir, "--log_level=warning", "--cost_model=" + cfg.profile,
                   absl::StrCat("--decision_log_size=", cfg.decisions + 100)},
          .cpus = cfg.router_cpus}));
  const std::string registry = router->internal_grpc_address();
  Progress("fleet", absl::StrCat("starting ", cfg.decode_workers, " emulated decode workers"));
  std::vector<std::unique_ptr<ChildProcess>> workers;
  const absl::Time spawn_start = absl::Now();
  for (int i = 0; i < cfg.decode_workers; ++i) {
    ASSIGN_OR_RETURN(
        auto w, ChildProcess::Start(ChildOptions{
                    .binary = "pdserve-decode",
                    .args = {"--model=" + dir, "--backend=emulated", "--profile=" + cfg.profile,
                             "--router=" + registry, absl::StrCat("--worker_id=decode-", i),
                             "--ucx_transports=shm", "--log_level=warning",
                             "--max_num_batched_tokens=2048", "--max_num_seqs=256"},
                    .startup_timeout = absl::Minutes(2),
                    .cpus = cfg.worker_cpus}));
    workers.push_back(std::move(w));
    if ((i + 1) % 32 == 0) Progress("fleet", absl::StrCat(i + 1, " started"));
  }
  const absl::Time spawned = absl::Now();
  int registered = 0;
  while (registered < cfg.decode_workers) {
    ASSIGN_OR_RETURN(const v1::ClusterStatus s, Status(registry, 0));
    registered = Registered(s);
    if (absl::Now() - spawned > absl::Minutes(5)) {
      return absl::DeadlineExceededError(
          absl::StrCat(registered, " of ", cfg.decode_workers, " registered after 5 minutes"));
    }
    if (registered < cfg.decode_workers) absl::SleepFor(absl::Milliseconds(20));
  }
  const absl::Time all_registered = absl::Now();
  const double start_s = absl::ToDoubleSeconds(all_registered - spawn_start);
  const double after_s = absl::ToDoubleSeconds(all_registered - spawned);
  summary["registration_all_s"] = start_s;
  summary["registration_after_last_start_s"] = after_s;
  table.AddRow(
      {absl::StrCat("start and register ", cfg.decode_workers, " workers"),
       absl::StrCat(Fixed(start_s, 1), " s (", Fixed(after_s, 2), " s after the last started)")});

  // Idle footprint, every worker reporting to the router.
  absl::SleepFor(absl::Seconds(5));
  auto sample_all = [&]() -> absl::StatusOr<std::vector<ProcessSample>> {
    std::vector<ProcessSample> out;
    ASSIGN_OR_RETURN(ProcessSample r, SampleProcess(router->pid()));
    out.push_back(r);
    for (const auto& w : workers) {
      ASSIGN_OR_RETURN(ProcessSample s, SampleProcess(w->pid()));
      out.push_back(s);
    }
    return out;
  };
  Progress("fleet", absl::StrCat("idle footprint over ", absl::FormatDuration(cfg.idle_window)));
  ASSIGN_OR_RETURN(const auto before, sample_all());
  absl::SleepFor(cfg.idle_window);
  ASSIGN_OR_RETURN(const auto after, sample_all());
  const double window_s = absl::ToDoubleSeconds(cfg.idle_window);
  std::vector<double> rss, cpu;
  double cpu_total = 0;
  for (size_t i = 1; i < after.size(); ++i) {
    rss.push_back(after[i].rss_mb);
    cpu.push_back(100 * (after[i].cpu_s - before[i].cpu_s) / window_s);
    cpu_total += cpu.back();
  }
  const double router_idle_cpu = 100 * (after[0].cpu_s - before[0].cpu_s) / window_s;
  summary["idle_worker_rss_mb_median"] = Median(rss);
  summary["idle_worker_rss_mb_max"] = *std::max_element(rss.begin(), rss.end());
  summary["idle_worker_cpu_percent_median"] = Median(cpu);
  summary["idle_worker_cpu_percent_max"] = *std::max_element(cpu.begin(), cpu.end());
  summary["idle_workers_cpu_percent_total"] = cpu_total;
  summary["router_idle_cpu_percent"] = router_idle_cpu;
  summary["router_idle_rss_mb"] = after[0].rss_mb;
  table.AddRow({"idle worker RSS (median, max)",
                absl::StrCat(Fixed(Median(rss), 1), " MB, ",
                             Fixed(*std::max_element(rss.begin(), rss.end()), 1), " MB")});
  table.AddRow({"idle worker CPU (median, max; all workers)",
                absl::StrCat(Fixed(Median(cpu), 2), " %, ",
                             Fixed(*std::max_element(cpu.begin(), cpu.end()), 2), " %; ",
                             Fixed(cpu_total, 1), " % of a core")});
  table.AddRow(
      {"router, workers idle and reporting",
       absl::StrCat(Fixed(router_idle_cpu, 1), " % CPU, ", Fixed(after[0].rss_mb, 1), " MB")});

  // Decisions among N live workers, from the router's own records of our requests.
  const auto channel = client::MakeChannel(router->grpc_address(), GrpcSecurity());
  Progress("fleet", absl::StrCat(cfg.decisions, " requests, ", cfg.concurrency, " at a time"));
  std::atomic<int> next{0}, failed{0};
  std::vector<std::thread> clients;
  ASSIGN_OR_RETURN(const ProcessSample router_before, SampleProcess(router->pid()));
  const absl::Time load_start = absl::Now();
  for (int c = 0; c < cfg.concurrency; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(c + 1);
      for (int i = next++; i < cfg.decisions; i = next++) {
        std::vector<int32_t> prompt(100 + rng() % 3500);
        for (auto& t : prompt) t = static_cast<int32_t>(rng() % 4000);
        auto out = client::CallGenerate(channel, client::MakeRequest(prompt, 2), absl::Minutes(1));
        if (!out.status.ok()) ++failed;
      }
    });
  }
  for (auto& t : clients) t.join();
  const double load_s = absl::ToDoubleSeconds(absl::Now() - load_start);
  ASSIGN_OR_RETURN(const ProcessSample router_after, SampleProcess(router->pid()));
  // The router keeps and returns at most 1,000 decisions: the newest of ours.
  ASSIGN_OR_RETURN(const v1::ClusterStatus decided,
                   Status(registry, static_cast<uint32_t>(std::min(cfg.decisions, 1000))));
  std::vector<double> us;
  for (const v1::DecisionRecord& d : decided.recent_decisions()) us.push_back(d.decision_us());
  if (us.empty()) return absl::InternalError("the router recorded no decisions");
  const double router_load_cpu = 100 * (router_after.cpu_s - router_before.cpu_s) / load_s;
  summary["decisions_recorded"] = us.size();
  summary["decision_p50_us"] = Percentile(us, 50);
  summary["decision_p99_us"] = Percentile(us, 99);
  summary["decision_requests_failed"] = failed.load();
  summary["router_load_cpu_percent"] = router_load_cpu;
  summary["router_load_rss_mb"] = router_after.rss_mb;
  summary["load_requests_per_s"] = cfg.decisions / load_s;
  table.AddRow(
      {absl::StrCat("decision among ", cfg.decode_workers, " workers (", us.size(), " requests)"),
       absl::StrCat("p50 ", Fixed(Percentile(us, 50), 1), " us, p99 ", Fixed(Percentile(us, 99), 1),
                    " us; ", failed.load(), " failed")});
  table.AddRow(
      {absl::StrCat("router under ", Fixed(cfg.decisions / load_s, 0), " requests/s"),
       absl::StrCat(Fixed(router_load_cpu, 1), " % CPU, ", Fixed(router_after.rss_mb, 1), " MB")});

  // The relay's overhead against one worker (decode-0) reached directly.
  RelayConfig relay;
  relay.rounds = cfg.relay_rounds;
  relay.streams = cfg.relay_streams;
  relay.tokens = cfg.relay_tokens;
  ASSIGN_OR_RETURN(
      const RelayResult r,
      MeasureRelay(channel, client::MakeChannel(workers[0]->grpc_address(), GrpcSecurity()),
                   relay));
  summary["relay_itl_ms_router"] = r.itl_ms_router;
  summary["relay_itl_ms_direct"] = r.itl_ms_direct;
  summary["relay_itl_overhead"] = r.itl_overhead();
  summary["relay_ttft_ms_router"] = r.ttft_ms_router;
  summary["relay_ttft_ms_direct"] = r.ttft_ms_direct;
  table.AddRow({"ITL through the router / direct (mean)",
                absl::StrCat(Fixed(r.itl_ms_router, 3), " / ", Fixed(r.itl_ms_direct, 3),
                             " ms = ", Fixed(r.itl_ms_router / r.itl_ms_direct, 3), "x")});

  // A worker SIGKILLed while requests keep arriving: until the registry drops it, and how many
  // requests were still placed on it.
  const std::string victim = absl::StrCat("decode-", cfg.decode_workers / 2);
  std::atomic<bool> stop{false};
  std::atomic<int> sent{0}, errors{0};
  std::thread traffic([&] {
    std::mt19937 rng(7);
    while (!stop) {
      std::vector<int32_t> prompt(64);
      for (auto& t : prompt) t = static_cast<int32_t>(rng() % 4000);
      auto out = client::CallGenerate(channel, client::MakeRequest(prompt, 2), absl::Seconds(30));
      ++sent;
      if (!out.status.ok()) ++errors;
    }
  });
  absl::SleepFor(absl::Milliseconds(500));
  const absl::Time killed = absl::Now();
  workers[cfg.decode_workers / 2]->Kill();
  double removed_ms = -1;
  while (absl::Now() - killed < absl::Seconds(30)) {
    ASSIGN_OR_RETURN(const v1::ClusterStatus s, Status(registry, 0));
    bool present = false;
    for (const v1::WorkerStatus& w : s.workers()) present |= w.registration().worker_id() == victim;
    if (!present) {
      removed_ms = absl::ToDoubleMilliseconds(absl::Now() - killed);
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::SleepFor(absl::Milliseconds(500));
  stop = true;
  traffic.join();
  ASSIGN_OR_RETURN(const v1::ClusterStatus s, Status(registry, 1000));
  int placed_after = 0;
  const int64_t kill_ns = absl::ToUnixNanos(killed);
  for (const v1::DecisionRecord& d : s.recent_decisions()) {
    if (d.time_unix_nanos() > kill_ns && d.placement().decode_worker_id() == victim) ++placed_after;
  }
  summary["kill_removed_ms"] = removed_ms;
  summary["kill_requests_sent"] = sent.load();
  summary["kill_requests_failed"] = errors.load();
  summary["kill_placed_on_dead_worker"] = placed_after;
  table.AddRow({"SIGKILLed worker out of the registry",
                absl::StrCat(Fixed(removed_ms, 1), " ms; ", placed_after,
                             " requests placed on it after the kill, ", errors.load(), " of ",
                             sent.load(), " failed")});
  const double p99 = summary["decision_p99_us"].get<double>();
  summary["targets"] = {{"idle_worker_rss_mb_max", 50},
                        {"idle_worker_cpu_percent_max", 1},
                        {"decision_p99_us_max", 50},
                        {"relay_itl_overhead_max", 0.03},
                        {"footprint_met", Median(rss) <= 50 && Median(cpu) < 1},
                        {"decision_met", p99 <= 50},
                        {"relay_met", r.itl_overhead() <= 0.03}};
  std::printf("pdserve-bench fleet (%d emulated decode workers, %s)\n%s", cfg.decode_workers,
              cfg.profile.c_str(), table.ToString().c_str());
  std::printf(
      "targets: idle worker <= 50 MB and < 1%% CPU: %s; decision p99 <= 50 us: %s; relay "
      "ITL overhead <= 3%%: %s\n",
      summary["targets"]["footprint_met"].get<bool>() ? "met" : "NOT met",
      p99 <= 50 ? "met" : "NOT met", r.itl_overhead() <= 0.03 ? "met" : "NOT met");
  return WriteSummary(cfg.out_dir, summary);
}

}  // namespace pdserve::bench
