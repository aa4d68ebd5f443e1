#include "bench/chaos/chaos_bench.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "bench/chaos/namespace_hosts.h"
#include "bench/common/cluster_checks.h"
#include "common/shutdown_signal.h"
#include "common/status_macros.h"
#include "common/text_table.h"
#include "tools/client/generation_client.h"
#include "tools/make_model/model_maker.h"
#include "tools/measure/report.h"
#include "tools/pdctl/cluster_launcher.h"
#include "tools/pdctl/commands.h"
#include "tools/pdctl/supervisor.h"

namespace pdserve::bench {

using measure::MachineInfo;
using measure::Progress;
using measure::WriteSummary;

using testbed::LinkDirection;
using testbed::NetnsTopology;
namespace {

constexpr const char* kBench = "chaos";

// A request of the pool and the tokens it gets alone.
struct PoolEntry {
  std::string kind;
  v1::GenerateRequest request;
  std::vector<int32_t> reference;
};

std::vector<PoolEntry> MakePool(int size, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto prompt = [&](int n) {
    std::vector<int32_t> p(n);
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    return p;
  };
  auto between = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  const std::vector<int32_t> shared = prompt(200);
  std::vector<PoolEntry> pool;
  for (int i = 0; i < size; ++i) {
    PoolEntry e;
    switch (i % 4) {
      case 0:  // Short: prefilled on the decode worker.
        e.kind = "short";
        e.request = client::MakeRequest(prompt(between(20, 80)), between(16, 32));
        break;
      case 1:  // Long: offloaded (over --length_threshold).
        e.kind = "long";
        e.request = client::MakeRequest(prompt(between(300, 600)), between(8, 16));
        break;
      case 2: {  // Seeded sampling, short or long.
        e.kind = "sampled";
        e.request = client::MakeRequest(prompt(between(40, 400)), between(16, 32), 0.8f);
        e.request.mutable_sampling()->set_seed(rng());
        break;
      }
      default: {  // A follow-up on a shared prefix: prefix-cache hits.
        e.kind = "follow_up";
        std::vector<int32_t> p = shared;
        const std::vector<int32_t> tail = prompt(between(10, 40));
        p.insert(p.end(), tail.begin(), tail.end());
        e.request = client::MakeRequest(p, between(12, 24));
        break;
      }
    }
    e.request.mutable_sampling()->set_ignore_eos(true);
    pool.push_back(std::move(e));
  }
  return pool;
}

bool IsPrefix(const std::vector<int32_t>& part, const std::vector<int32_t>& whole) {
  return part.size() <= whole.size() && std::equal(part.begin(), part.end(), whole.begin());
}

// Token-level findings beyond the outcome codes.
struct StreamChecks {
  std::atomic<int64_t> completed{0};          // OK with every reference token.
  std::atomic<int64_t> tokens_verified{0};    // Tokens compared with a reference.
  std::atomic<int64_t> wrong_tokens{0};       // A stream that is not a prefix of its reference.
  std::atomic<int64_t> short_completions{0};  // OK with fewer tokens than asked.
  std::atomic<int64_t> past_deadline{0};      // Ended later than its deadline allows.
  std::atomic<int64_t> offloaded{0};          // Completed with KV from a prefill worker.
  std::atomic<int64_t> fell_back{0};          // Placed to offload, prefilled locally.
};

void OneRequest(const std::shared_ptr<grpc::Channel>& channel, const std::vector<PoolEntry>& pool,
                absl::Duration deadline, std::mt19937_64& rng, OutcomeTally* tally,
                StreamChecks* checks) {
  const PoolEntry& e = pool[rng() % pool.size()];
  // One in ten is cancelled by its client within 300 ms.
  const absl::Duration cancel_after = rng() % 10 == 0
                                          ? absl::Milliseconds(static_cast<int64_t>(rng() % 300))
                                          : absl::InfiniteDuration();
  bool cancelled = false;
  const absl::Time start = absl::Now();
  const client::GenerationOutcome out =
      client::CallGenerateCancellingAfter(channel, e.request, deadline, cancel_after, &cancelled);
  const absl::Duration took = absl::Now() - start;
  const grpc::StatusCode code = out.status.error_code();
  std::string why = out.status.error_message();
  bool expected = code == grpc::StatusCode::UNAVAILABLE ||
                  code == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                  code == grpc::StatusCode::DEADLINE_EXCEEDED ||
                  (code == grpc::StatusCode::CANCELLED && cancelled);
  checks->tokens_verified += static_cast<int64_t>(out.tokens.size());
  if (!IsPrefix(out.tokens, e.reference)) {
    ++checks->wrong_tokens;
    expected = false;
    why = absl::StrCat("tokens differ from the solo reference after ", out.tokens.size(),
                       " tokens (", why, ")");
  } else if (code == grpc::StatusCode::OK) {
    expected = out.tokens.size() == e.reference.size();
    const v1::Placement& placement = out.result.placement();
    if (placement.fell_back_to_local()) {
      ++checks->fell_back;
    } else if (placement.mode() == v1::PLACEMENT_MODE_OFFLOAD) {
      ++checks->offloaded;
    }
    if (expected) {
      ++checks->completed;
    } else {
      ++checks->short_completions;
      why = absl::StrCat("OK with ", out.tokens.size(), " of ", e.reference.size(), " tokens");
    }
  }
  // The client's own deadline ends the call; a second of slack for its last steps.
  if (took > deadline + absl::Seconds(1)) {
    ++checks->past_deadline;
    expected = false;
    why = absl::StrCat("ended ", absl::FormatDuration(took), " after it started (deadline ",
                       absl::FormatDuration(deadline), ")");
  }
  tally->Add(e.kind, code, expected, why);
  // As a client should: a cluster that refused or is not there is not asked again at once
  // (a router being restarted would otherwise see a storm of calls).
  if (code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::RESOURCE_EXHAUSTED)
    absl::SleepFor(absl::Milliseconds(50 + static_cast<int64_t>(rng() % 100)));
}

// A fault of the network between the hosts, held for its duration and then healed: host
// partitioned for 1-10 s, or its link losing 1-5 % of its packets or limited to 100 Mbit/s
// (from the host, to it, or both) for 5-15 s, never past `end`. Returns its description;
// counts it in `counts` and the packets the fault dropped in `dropped`.
absl::StatusOr<std::string> NetworkFault(NetnsTopology& net, const std::vector<std::string>& names,
                                         std::mt19937_64& rng, absl::Time end,
                                         std::map<std::string, int>& counts, int64_t& dropped) {
  const size_t host = rng() % names.size();
  const int kind = static_cast<int>(rng() % 3);
  const absl::Duration drawn = absl::Seconds(kind == 0 ? 1 + static_cast<int>(rng() % 10)
                                                       : 5 + static_cast<int>(rng() % 11));
  const absl::Duration lasting = std::min(drawn, std::max(absl::Seconds(1), end - absl::Now()));
  const LinkDirection direction = static_cast<LinkDirection>(rng() % 3);
  const char* way = direction == LinkDirection::kFromHost ? "from"
                    : direction == LinkDirection::kToHost ? "to"
                                                          : "both ways at";
  std::string fault;
  if (kind == 0) {
    fault = absl::StrCat("partition ", names[host], " for ", absl::FormatDuration(lasting));
    ++counts["partition a host"];
    RETURN_IF_ERROR(net.SetConnected(host, false));
    absl::SleepFor(lasting);
    return net.SetConnected(host, true).ok() ? absl::StatusOr<std::string>(fault)
                                             : absl::InternalError("cannot heal " + fault);
  }
  const bool loss = kind == 1;
  const int percent = 1 + static_cast<int>(rng() % 5);
  fault = absl::StrCat(loss ? absl::StrCat(percent, "% loss ") : "100 Mbit/s ", way, " ",
                       names[host], " for ", absl::FormatDuration(lasting));
  ++counts[loss ? "lossy link (1-5%)" : "100 Mbit/s link"];
  const int64_t before = net.DroppedPackets(host, LinkDirection::kBoth);
  RETURN_IF_ERROR(loss ? net.SetLoss(host, percent, direction) : net.SetRate(host, 100, direction));
  absl::SleepFor(lasting);
  // Read before healing: removing a rate limit removes its queue and its counters.
  const int64_t after = net.DroppedPackets(host, LinkDirection::kBoth);
  RETURN_IF_ERROR(loss ? net.SetLoss(host, 0, direction) : net.SetRate(host, 0, direction));
  if (before >= 0 && after >= before) dropped += after - before;
  return fault;
}

}  // namespace

absl::Status RunChaosBench(const ChaosBenchConfig& cfg) {
  if (cfg.out_dir.empty()) return absl::InvalidArgumentError("--out: required");
  if (cfg.duration < absl::Seconds(20))
    return absl::InvalidArgumentError("--duration: must be >= 20s");
  if (cfg.clients < 1 || cfg.clients > 256)
    return absl::InvalidArgumentError("--clients: must be in [1, 256]");
  if (cfg.fault_interval < absl::Seconds(1))
    return absl::InvalidArgumentError("--fault_interval: must be >= 1s");
  std::string dir = cfg.model_dir;
  if (dir.empty()) {
    dir = "models/tiny";
    ASSIGN_OR_RETURN(tools::ModelSpec spec, tools::ModelSpec::Preset("tiny"));
    RETURN_IF_ERROR(tools::EnsureModel(spec, dir));
  }
  dir = std::filesystem::absolute(dir).string();
  const auto model_json = nlohmann::json::parse(ReadTextFile(dir + "/config.json"), nullptr, false);
  if (model_json.is_discarded() || !model_json.contains("vocab_size")) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/config.json: no vocab_size"));
  }
  const int vocab = model_json["vocab_size"].get<int>();

  pdctl::ClusterConfig c;
  c.run_dir = std::filesystem::absolute(cfg.out_dir + "/cluster").string();
  std::filesystem::remove_all(c.run_dir);
  c.model_dir = dir;
  c.router_listen = "127.0.0.1:0";
  c.router_registry_listen = "127.0.0.1:0";
  c.policy = "length_threshold";
  c.ucx_transports = "tcp";  // The path between hosts, on loopback.
  c.router.name = "router";
  c.router.flags = {"--length_threshold=256", "--log_level=warning", "--worker_timeout=3s"};
  auto worker = [](const std::string& name, std::vector<std::string> flags) {
    pdctl::ProcessSpec p;
    p.name = name;
    p.flags = std::move(flags);
    for (const char* f : {"--log_level=warning", "--ucx_net_devices=lo", "--drain_timeout=5s"})
      p.flags.push_back(f);
    return p;
  };
  // 128 blocks (2,048 tokens) per decode worker, fewer than the pool's prompts need: cached
  // prefixes are evicted, so long prompts keep being offloaded rather than served from cache.
  for (int i = 0; i < 3; ++i)
    c.decode.push_back(worker(absl::StrCat("decode-", i), {"--num_blocks=128"}));
  for (int i = 0; i < 2; ++i) c.prefill.push_back(worker(absl::StrCat("prefill-", i), {}));
  // Across hosts: declared before the teardown below, so removed after the processes stop.
  std::optional<NamespaceHosts> hosts;
  if (cfg.netns) {
    ASSIGN_OR_RETURN(hosts, PlaceOnNamespaces(c));
    Progress(kBench, "starting the cluster on 6 hosts (network namespaces; mTLS; UCX over TCP)");
  } else {
    Progress(kBench, "starting the cluster (router, 2 prefill, 3 decode workers; UCX over TCP)");
  }
  const GrpcSecurity& security = c.security;
  {
    ASSIGN_OR_RETURN(pdctl::LaunchedCluster cluster, pdctl::LaunchCluster(c, /*detached=*/true));
    RETURN_IF_ERROR(cluster.state.Write(pdctl::ClusterState::PathIn(c.run_dir)));
    cluster.Release();  // The supervisor and Down() own them now.
  }
  ASSIGN_OR_RETURN(pdctl::ClusterState started,
                   pdctl::ClusterState::Read(pdctl::ClusterState::PathIn(c.run_dir)));
  auto channel = client::MakeChannel(started.router, security);
  std::ostringstream down_log;
  // However this ends, nothing is left running.
  struct Teardown {
    std::string run_dir;
    std::ostringstream* log;
    ~Teardown() { pdctl::Down(run_dir, absl::Seconds(10), *log).IgnoreError(); }
  } teardown{c.run_dir, &down_log};

  // The references: each request alone on the quiet cluster.
  Progress(kBench, absl::StrCat("measuring ", cfg.pool, " references alone"));
  std::vector<PoolEntry> pool = MakePool(cfg.pool, vocab, cfg.seed);
  for (PoolEntry& e : pool) {
    const client::GenerationOutcome out =
        client::CallGenerate(channel, e.request, absl::Seconds(120));
    if (!out.status.ok() ||
        out.tokens.size() != static_cast<size_t>(e.request.sampling().max_tokens())) {
      return absl::UnavailableError(absl::StrCat("the quiet cluster did not serve a reference: ",
                                                 out.status.error_message()));
    }
    e.reference = out.tokens;
  }

  // The supervisor, in this process (as `pdctl supervise`).
  pdctl::SupervisionPolicy policy;
  policy.backoff_initial = absl::Milliseconds(200);
  policy.backoff_max = absl::Seconds(2);
  policy.max_restarts = 1000;  // Chaos kills on purpose; an abort shows as an extra exit.
  absl::Notification supervisor_ready;
  ShutdownSignal* stop_supervisor = nullptr;
  absl::Status supervised;
  std::thread supervisor([&] {
    ShutdownSignal stop;
    stop_supervisor = &stop;
    supervisor_ready.Notify();
    supervised = pdctl::Supervisor(c.run_dir, policy, security).Run(stop);
  });
  supervisor_ready.WaitForNotification();

  OutcomeTally tally;
  StreamChecks checks;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int i = 0; i < cfg.clients; ++i) {
    clients.emplace_back([&, i] {
      std::mt19937_64 rng(cfg.seed * 1000 + static_cast<uint64_t>(i));
      while (!stop.load()) OneRequest(channel, pool, cfg.deadline, rng, &tally, &checks);
    });
  }

  // The fault schedule: seeded, one fault at a time.
  std::mt19937_64 fault_rng(cfg.seed ^ 0x9E3779B97F4A7C15ULL);
  std::map<std::string, int> kills;  // By process name.
  std::map<std::string, int> fault_counts;
  std::vector<std::string> faults;
  int64_t packets_dropped = 0;
  absl::Status schedule_error;
  const absl::Time end = absl::Now() + cfg.duration;
  while (absl::Now() + cfg.fault_interval < end) {
    absl::SleepFor(cfg.fault_interval);
    auto state = pdctl::ClusterState::Read(pdctl::ClusterState::PathIn(c.run_dir));
    if (!state.ok()) {  // The cluster's file is gone: nothing to aim at; the run fails.
      schedule_error = state.status();
      Progress(kBench, absl::StrCat("cannot read the cluster's state; ending the run: ",
                                    schedule_error.message()));
      break;
    }
    // The target's role goes round (router, prefill, decode; the network across hosts), so
    // that even a short run hits each; the process within the role and the fault are drawn.
    const char* roles[] = {"router", "prefill", "decode", "network"};
    const std::string role = roles[faults.size() % (hosts.has_value() ? 4 : 3)];
    if (role == "network") {
      absl::StatusOr<std::string> fault =
          NetworkFault(*hosts->net, hosts->process, fault_rng, end, fault_counts, packets_dropped);
      if (!fault.ok()) {  // The run cannot go on as scheduled: it ends now, and fails.
        schedule_error = fault.status();
        Progress(kBench, absl::StrCat("a network fault failed; ending the run: ",
                                      schedule_error.message()));
        break;
      }
      faults.push_back(*fault);
      Progress(kBench, absl::StrCat("fault ", faults.size(), ": ", *fault));
      continue;
    }
    std::vector<const pdctl::ProcessState*> running;
    for (const pdctl::ProcessState& p : state->processes) {
      if (p.role == role && pdctl::ProcessRuns(p.pid, p.binary)) running.push_back(&p);
    }
    if (running.empty()) {
      faults.push_back(absl::StrCat("none (no ", role, " running)"));
      continue;
    }
    const pdctl::ProcessState& target = *running[fault_rng() % running.size()];
    std::string fault;
    if (fault_rng() % 10 < 4) {
      fault = absl::StrCat("SIGKILL ", target.name);
      ++kills[target.name];
      ++fault_counts[absl::StrCat("kill ", target.role)];
      kill(target.pid, SIGKILL);
    } else {
      const absl::Duration pause = std::min(absl::Seconds(1 + static_cast<int>(fault_rng() % 10)),
                                            std::max(absl::Seconds(1), end - absl::Now()));
      fault = absl::StrCat("SIGSTOP ", target.name, " for ", absl::FormatDuration(pause));
      ++fault_counts[absl::StrCat("stop ", target.role)];
      kill(target.pid, SIGSTOP);
      absl::SleepFor(pause);
      kill(target.pid, SIGCONT);
    }
    faults.push_back(fault);
    Progress(kBench, absl::StrCat("fault ", faults.size(), ": ", fault));
  }
  while (schedule_error.ok() && absl::Now() < end) absl::SleepFor(absl::Milliseconds(100));
  stop = true;
  for (auto& t : clients) t.join();

  // Healed: every process up (restarted where killed) and registered, decode workers at
  // baseline, the router relaying nothing.
  Progress(kBench, "faults over; waiting for every process, registration and baseline");
  bool healed = false;
  std::vector<v1::DecodeStats> decode_stats;
  uint32_t in_flight = UINT32_MAX;
  int registered = 0;
  const absl::Time heal_deadline = absl::Now() + absl::Seconds(90);
  while (!healed && absl::Now() < heal_deadline) {
    auto state = pdctl::ClusterState::Read(pdctl::ClusterState::PathIn(c.run_dir));
    healed = state.ok();
    decode_stats.clear();
    for (const pdctl::ProcessState& p :
         state.ok() ? state->processes : std::vector<pdctl::ProcessState>{}) {
      healed &= pdctl::ProcessRuns(p.pid, p.binary);
      if (p.role == "decode") {
        decode_stats.push_back(FetchDecodeStats(p.grpc, security));
        healed &= client::AtBaseline(decode_stats.back());
      }
    }
    auto status = pdctl::FetchClusterStatus(started.registry_address(), 0, security);
    in_flight = status.ok() ? status->in_flight() : UINT32_MAX;
    registered = 0;
    if (status.ok()) {
      for (const v1::WorkerStatus& w : status->workers())
        registered += w.load().sequence() > 0 ? 1 : 0;
    }
    healed &= in_flight == 0 && registered == 5;
    if (!healed) absl::SleepFor(absl::Milliseconds(200));
  }
  stop_supervisor->Trigger();
  supervisor.join();

  // Exits beyond the kills are aborts; every log (restarted processes' old ones too) is read.
  std::map<std::string, int> exits;
  for (const pdctl::SupervisionEvent& e : pdctl::ReadEvents(c.run_dir, 0)) {
    if (e.event == "exited") ++exits[e.process];
  }
  int aborts = 0;
  Table processes({"process", "killed", "exited", "aborts", "log clean"});
  nlohmann::json process_json = nlohmann::json::array();
  bool logs_clean = true;
  auto state = pdctl::ClusterState::Read(pdctl::ClusterState::PathIn(c.run_dir));
  for (const pdctl::ProcessState& p :
       state.ok() ? state->processes : std::vector<pdctl::ProcessState>{}) {
    std::vector<std::string> reports;
    for (const auto& file : std::filesystem::directory_iterator(c.run_dir)) {
      const std::string name = file.path().filename().string();
      if (!absl::StartsWith(name, p.name + ".log")) continue;
      for (const std::string& r : BrokenProcessReports(ReadTextFile(file.path().string())))
        reports.push_back(absl::StrCat(name, ": ", r));
    }
    const int extra = std::max(0, exits[p.name] - kills[p.name]);
    aborts += extra;
    logs_clean &= reports.empty();
    processes.AddRow({p.name, absl::StrCat(kills[p.name]), absl::StrCat(exits[p.name]),
                      absl::StrCat(extra), reports.empty() ? "yes" : "NO"});
    process_json.push_back({{"name", p.name},
                            {"killed", kills[p.name]},
                            {"exited", exits[p.name]},
                            {"restarts", p.restarts},
                            {"reports", reports}});
  }
  Table fault_table({"fault", "count"});
  for (const auto& [kind, n] : fault_counts) fault_table.AddRow({kind, absl::StrCat(n)});
  const Table requests = tally.ToTable();
  const int total = tally.total();
  nlohmann::json decode_json = nlohmann::json::array();
  for (const v1::DecodeStats& s : decode_stats) decode_json.push_back(DecodeStatsJson(s));
  const bool passed = healed && aborts == 0 && logs_clean && tally.unexpected() == 0 &&
                      checks.completed.load() > 0 && supervised.ok() && schedule_error.ok() &&
                      checks.offloaded.load() > 0;
  const nlohmann::json summary = {{"bench", "chaos"},
                                  {"machine", MachineInfo()},
                                  {"duration_s", absl::ToDoubleSeconds(cfg.duration)},
                                  {"clients", cfg.clients},
                                  {"seed", cfg.seed},
                                  {"across_hosts", cfg.netns},
                                  {"link_packets_dropped", packets_dropped},
                                  {"faults", faults},
                                  {"fault_counts", fault_counts},
                                  {"requests", total},
                                  {"outcomes", tally.ToJson()},
                                  {"completed_with_reference_tokens", checks.completed.load()},
                                  {"tokens_verified", checks.tokens_verified.load()},
                                  {"wrong_token_streams", checks.wrong_tokens.load()},
                                  {"short_completions", checks.short_completions.load()},
                                  {"past_deadline", checks.past_deadline.load()},
                                  {"offloaded", checks.offloaded.load()},
                                  {"fell_back", checks.fell_back.load()},
                                  {"aborts", aborts},
                                  {"logs_clean", logs_clean},
                                  {"healed", healed},
                                  {"registered_workers", registered},
                                  {"router_in_flight", in_flight},
                                  {"decode_workers", decode_json},
                                  {"processes", process_json},
                                  {"passed", passed}};
  RETURN_IF_ERROR(WriteSummary(cfg.out_dir, summary));
  std::printf(
      "%s\n%s\n%s\n%zu faults; %d requests, %lld completed with their reference tokens (%lld "
      "offloaded, %lld fell back to local prefill; %lld tokens verified); wrong-token streams "
      "%lld, short completions %lld, past deadline %lld, unexpected outcomes %d; aborts %d; "
      "healed %s; %s\n",
      fault_table.ToString().c_str(), requests.ToString().c_str(), processes.ToString().c_str(),
      faults.size(), total, static_cast<long long>(checks.completed.load()),
      static_cast<long long>(checks.offloaded.load()),
      static_cast<long long>(checks.fell_back.load()),
      static_cast<long long>(checks.tokens_verified.load()),
      static_cast<long long>(checks.wrong_tokens.load()),
      static_cast<long long>(checks.short_completions.load()),
      static_cast<long long>(checks.past_deadline.load()), tally.unexpected(), aborts,
      healed ? "yes" : "NO", passed ? "PASSED" : "FAILED");
  if (hosts.has_value()) {
    std::printf(
        "across %zu hosts (network namespaces, mTLS); the link faults dropped %lld packets\n",
        hosts->process.size(), static_cast<long long>(packets_dropped));
  }
  if (!passed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "chaos failed: healed=", healed, " aborts=", aborts, " logs_clean=", logs_clean,
        " offloaded=", checks.offloaded.load(), " (none: the KV path was never exercised)",
        " supervisor=", supervised.ToString(), " fault schedule=", schedule_error.ToString(),
        " unexpected=", tally.ToJson()["examples"].dump()));
  }
  return absl::OkStatus();
}

}  // namespace pdserve::bench
