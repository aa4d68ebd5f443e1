// pdctl: cluster.yaml parsing (unknown keys and wrong types name the key), and the whole
// lifecycle with real processes: up (detached, registered, state recorded), generate (text on
// stdout, placement and timings on stderr), status, down (every process gone); and a
// supervised cluster (up --supervise) that starts again what is killed, within its budget.
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/child_process.h"
#include "tests/testing/poll.h"
#include "tests/testing/test_models.h"
#include "tools/pdctl/cluster_config.h"
#include "tools/pdctl/cluster_state.h"
#include "tools/pdctl/supervisor.h"

namespace pdserve::pdctl {
namespace {

TEST(ClusterConfigTest, ParsesTheShippedLocalCluster) {
  auto c = LoadClusterConfig(std::string(PDSERVE_SOURCE_DIR) + "/deploy/local/cluster.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->decode.size(), 2u);
  EXPECT_EQ(c->prefill.size(), 1u);
  EXPECT_EQ(c->policy, "cost_model");
  EXPECT_EQ(c->model_preset, "tiny");
  EXPECT_EQ(c->router_registry_listen, "127.0.0.1:50052");  // Workers register apart.
}

TEST(ClusterConfigTest, ParsesTheShippedEmulatedCluster) {
  auto c = LoadClusterConfig(std::string(PDSERVE_SOURCE_DIR) + "/deploy/local/emulated-8gpu.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->decode.size() + c->prefill.size(), 8u);
  EXPECT_EQ(c->model_preset, "8b");
  EXPECT_FALSE(c->model_weights);
  EXPECT_EQ(c->model_max_position_embeddings, 131072);
  for (const ProcessSpec& p : c->decode) {
    EXPECT_TRUE(absl::c_linear_search(p.flags, "--backend=emulated")) << p.name;
  }
  EXPECT_TRUE(absl::c_linear_search(c->prefill[2].flags, "--backend=emulated"));
}

TEST(ClusterConfigTest, ErrorsNameTheFileAndTheKey) {
  struct Case {
    std::string yaml;
    std::string names;
  };
  for (const Case& c :
       {Case{"decode: [{name: d}]\nrouter: {polcy: x}\n", "router.polcy"},
        Case{"decode: [{name: d, threads: many}]\n", "decode[0].threads"},
        Case{"decode: [{name: d, cpus: [-1]}]\n", "decode[0].cpus"},
        Case{"decode: [{name: d}]\nprefill: [{name: p, nice: 20}]\n", "prefill[0].nice"},
        Case{"decode: [{name: d, nice: -1}]\n", "decode[0].nice"},
        Case{"prefill: [{name: x}]\n", "at least one decode worker"},
        Case{"decode: [{name: a}, {name: a}]\n", "used twice"},
        Case{"decode: {name: a}\n", "decode: must be a list"},
        Case{"surprise: 1\ndecode: [{name: a}]\n", "surprise"},
        Case{"decode: [\n", "not valid YAML"},
        Case{"model: {weights: maybe}\ndecode: [{name: a}]\n", "model.weights"},
        Case{"model: {max_position_embeddings: -5}\ndecode: [{name: a}]\n",
             "model.max_position_embeddings"}}) {
    auto parsed = ParseClusterConfig(c.yaml, "test.yaml");
    EXPECT_FALSE(parsed.ok()) << c.yaml;
    EXPECT_TRUE(absl::StrContains(parsed.status().message(), c.names)) << parsed.status();
    EXPECT_TRUE(absl::StrContains(parsed.status().message(), "test.yaml")) << parsed.status();
  }
}

// Runs pdctl to completion; returns its exit status, stdout+stderr in `log`.
int Pdctl(const std::vector<std::string>& args, std::string* log) {
  auto child = ChildProcess::Start(
      ChildOptions{.binary = "pdctl", .args = args, .expect_serving_info = false});
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return -1;
  auto status = (*child)->WaitExit(absl::Minutes(2));
  *log = (*child)->Log();
  EXPECT_TRUE(status.has_value()) << *log;
  return status.has_value() && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

TEST(PdctlTest, UpGenerateStatusDown) {
  const std::string dir =
      std::filesystem::temp_directory_path() / absl::StrCat("pdctl-test-", getpid());
  std::filesystem::create_directories(dir);
  const std::string yaml = dir + "/cluster.yaml";
  {
    std::ofstream out(yaml);
    out << "run_dir: " << dir << "/run\n"
        << "model: {dir: " << pdserve::testing::TestModelDir("tiny") << "}\n"
        << "router: {listen: 127.0.0.1:0, registry_listen: 127.0.0.1:0, policy: always_offload}\n"
        << "prefill: [{name: p0, threads: 1}]\n"
        << "decode: [{name: d0, threads: 1, flags: [--num_blocks=300]}]\n";
  }
  std::string log;
  ASSERT_EQ(Pdctl({"up", "-f", yaml}, &log), 0) << log;
  EXPECT_TRUE(absl::StrContains(log, "cluster up")) << log;
  auto state = ClusterState::Read(ClusterState::PathIn(dir + "/run"));
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->processes.size(), 3u);
  // The registry on its own listener: the workers were pointed there (they registered, or up
  // would have failed), and the public listener does not serve it.
  EXPECT_NE(state->registry, state->router);
  EXPECT_FALSE(state->registry.empty());
  for (const ProcessState& p : state->processes)
    EXPECT_TRUE(ProcessRuns(p.pid, p.binary)) << p.name;
  // The cluster's registry is closed: a fresh token only this user can read, which every
  // process was given.
  const std::string token_file = dir + "/run/registration-token";
  ASSERT_TRUE(std::filesystem::exists(token_file));
  EXPECT_EQ(std::filesystem::status(token_file).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  for (const ProcessState& p : state->processes) {
    std::ifstream cmdline(absl::StrCat("/proc/", p.pid, "/cmdline"));
    const std::string args((std::istreambuf_iterator<char>(cmdline)),
                           std::istreambuf_iterator<char>());
    EXPECT_TRUE(absl::StrContains(args, "--registration_token_file=" + token_file)) << p.name;
  }
  // Up returns once every worker registered: the router is ready for clients then, not at
  // its next sweep (a readiness probe right after up found it not serving).
  ASSERT_EQ(Pdctl({"health", "--address=" + state->router, "--service=pdserve.ready"}, &log), 0)
      << log;
  // A second up refuses while the first runs.
  EXPECT_EQ(Pdctl({"up", "-f", yaml}, &log), 1);
  EXPECT_TRUE(absl::StrContains(log, "already up")) << log;

  ASSERT_EQ(Pdctl({"generate", "-f", yaml, "--token_ids=5,6,7,8", "--max_tokens=6"}, &log), 0)
      << log;
  EXPECT_TRUE(absl::StrContains(log, "placement: OFFLOAD (policy_always_offload")) << log;
  EXPECT_TRUE(absl::StrContains(log, "prefill p0")) << log;
  EXPECT_TRUE(absl::StrContains(log, "6 generated")) << log;
  // Objectives travel with the request: the request's own TTFT is accepted; a class this
  // router does not have is refused, naming the field.
  ASSERT_EQ(
      Pdctl({"generate", "-f", yaml, "--token_ids=5,6", "--max_tokens=2", "--ttft=500ms"}, &log), 0)
      << log;
  EXPECT_NE(Pdctl({"generate", "-f", yaml, "--token_ids=5,6", "--slo_class=gold"}, &log), 0);
  EXPECT_TRUE(absl::StrContains(log, "objectives.slo_class: 'gold'")) << log;

  ASSERT_EQ(Pdctl({"status", "-f", yaml}, &log), 0) << log;
  EXPECT_TRUE(absl::StrContains(log, "policy always_offload")) << log;
  EXPECT_TRUE(absl::StrContains(log, "d0")) << log;
  EXPECT_TRUE(absl::StrContains(log, "policy_always_offload")) << log;
  EXPECT_TRUE(absl::StrContains(log, "/metrics")) << log;

  ASSERT_EQ(Pdctl({"down", "-f", yaml, "--grace=10s"}, &log), 0) << log;
  for (const ProcessState& p : state->processes) {
    EXPECT_FALSE(ProcessRuns(p.pid, p.binary)) << p.name;
    EXPECT_TRUE(absl::StrContains(log, "stopped " + p.name)) << log;
  }
  EXPECT_FALSE(std::filesystem::exists(ClusterState::PathIn(dir + "/run")));
  EXPECT_NE(Pdctl({"status", "-f", yaml}, &log), 0);
  EXPECT_TRUE(absl::StrContains(log, "no cluster is up")) << log;
  std::filesystem::remove_all(dir);
}

// `pdctl up` interrupted (Ctrl-C) while its workers registered once left them running with
// no cluster.json, out of `pdctl down`'s sight. Now each process is listed as soon as it runs,
// and an interrupted launch stops what it started and removes the list.
TEST(PdctlTest, AnInterruptedUpStopsWhatItStarted) {
  const std::string dir =
      std::filesystem::temp_directory_path() / absl::StrCat("pdctl-interrupt-", getpid());
  std::filesystem::create_directories(dir);
  const std::string yaml = dir + "/cluster.yaml";
  {
    std::ofstream out(yaml);
    // The worker is sent to a router that is not there (the last --router wins): it never
    // registers, and up waits for it until interrupted.
    out << "run_dir: " << dir << "/run\n"
        << "model: {dir: " << pdserve::testing::TestModelDir("tiny") << "}\n"
        << "startup_timeout_s: 100\n"
        << "router: {listen: 127.0.0.1:0}\n"
        << "prefill: []\n"
        << "decode: [{name: d0, threads: 1, flags: [--router=127.0.0.1:1]}]\n";
  }
  auto up = ChildProcess::Start(
      ChildOptions{.binary = "pdctl", .args = {"up", "-f", yaml}, .expect_serving_info = false});
  ASSERT_TRUE(up.ok()) << up.status();
  const std::string state_path = ClusterState::PathIn(dir + "/run");
  std::vector<ProcessState> started;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (started.size() < 2 && absl::Now() < deadline) {
    auto state = ClusterState::Read(state_path);
    if (state.ok()) started = state->processes;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(started.size(), 2u) << (*up)->Log();  // Listed while up still waits.
  for (const ProcessState& p : started) EXPECT_TRUE(ProcessRuns(p.pid, p.binary)) << p.name;
  kill((*up)->pid(), SIGINT);
  auto status = (*up)->WaitExit(absl::Seconds(30));
  ASSERT_TRUE(status.has_value()) << (*up)->Log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << (*up)->Log();
  EXPECT_TRUE(absl::StrContains((*up)->Log(), "interrupted")) << (*up)->Log();
  for (const ProcessState& p : started) {
    EXPECT_TRUE(pdserve::testing::PollUntil([&] { return !ProcessRuns(p.pid, p.binary); },
                                            absl::Seconds(15)))
        << p.name << " still runs";
  }
  EXPECT_FALSE(std::filesystem::exists(state_path));
  std::filesystem::remove_all(dir);
}

// up --supervise: a killed worker and a killed router are started again (the router at its
// addresses, so the workers register again by themselves and clients find it), requests are
// served after each; a worker killed once more than its budget allows is left down and said
// so; status shows the restarts and events; down stops the supervisor first, then the rest.
TEST(PdctlTest, ASupervisedClusterStartsAgainWhatIsKilledWithinItsBudget) {
  const std::string dir =
      std::filesystem::temp_directory_path() / absl::StrCat("pdctl-supervise-", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string yaml = dir + "/cluster.yaml";
  const std::string run = dir + "/run";
  {
    std::ofstream out(yaml);
    out << "run_dir: " << run << "\n"
        << "model: {dir: " << pdserve::testing::TestModelDir("tiny") << "}\n"
        << "router: {listen: 127.0.0.1:0, registry_listen: 127.0.0.1:0, policy: always_offload}\n"
        << "prefill: [{name: p0, threads: 1}]\n"
        << "decode: [{name: d0, threads: 1, flags: [--num_blocks=300]}]\n";
  }
  std::string log;
  ASSERT_EQ(
      Pdctl({"up", "-f", yaml, "--supervise", "--restart_backoff=100ms", "--max_restarts=2"}, &log),
      0)
      << log;
  EXPECT_TRUE(absl::StrContains(log, "supervised (pid")) << log;
  // A failed assertion below still brings the cluster and its supervisor down.
  struct DownOnExit {
    std::string yaml;
    ~DownOnExit() {
      std::string ignored;
      Pdctl({"down", "-f", yaml, "--grace=5s"}, &ignored);
    }
  } down_on_exit{yaml};
  auto state = ClusterState::Read(ClusterState::PathIn(run));
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_GT(state->supervisor_pid, 0);
  // `up` returns once the supervisor watches (it was once checked here while still in exec).
  ASSERT_TRUE(ProcessRuns(state->supervisor_pid, "pdctl"))
      << "supervisor log:\n"
      << std::string(std::istreambuf_iterator<char>(std::ifstream(run + "/supervisor.log").rdbuf()),
                     {});
  const ClusterState first = *state;

  // The pid of `name` once the supervisor has started it again for the `n`th time and it is
  // healthy (its "restarted" event); 0 if that does not happen.
  auto restarted = [&](const std::string& name, int n) -> pid_t {
    pid_t now = 0;
    pdserve::testing::PollUntil(
        [&] {
          int seen = 0;
          for (const SupervisionEvent& e : ReadEvents(run, 0))
            seen += e.process == name && e.event == "restarted" ? 1 : 0;
          if (seen < n) return false;
          auto s = ClusterState::Read(ClusterState::PathIn(run));
          if (!s.ok()) return false;
          for (const ProcessState& p : s->processes) {
            if (p.name == name && ProcessRuns(p.pid, p.binary)) now = p.pid;
          }
          return now != 0;
        },
        absl::Seconds(60));
    return now;
  };
  // Served, offloaded: both workers registered with the router (again).
  auto served = [&] {
    return pdserve::testing::PollUntil(
        [&] {
          return Pdctl({"generate", "-f", yaml, "--token_ids=5,6,7,8", "--max_tokens=4"}, &log) ==
                     0 &&
                 absl::StrContains(log, "placement: OFFLOAD") &&
                 !absl::StrContains(log, "fell back");
        },
        absl::Seconds(60), absl::Milliseconds(500));
  };

  const ProcessState& d0 = first.processes[2];
  ASSERT_EQ(d0.name, "d0");
  kill(d0.pid, SIGKILL);
  const pid_t d0_again = restarted("d0", 1);
  ASSERT_NE(d0_again, 0) << "d0 was not started again";
  EXPECT_TRUE(served()) << log;

  const ProcessState& router = first.processes[0];
  kill(router.pid, SIGKILL);
  const pid_t router_again = restarted("router", 1);
  ASSERT_NE(router_again, 0) << "the router was not started again";
  state = ClusterState::Read(ClusterState::PathIn(run));
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->processes[0].grpc, router.grpc) << "the router came back elsewhere";
  EXPECT_EQ(state->registry, first.registry);
  EXPECT_TRUE(served()) << log;

  // d0's budget is 2 restarts: the second kill is restarted, the third is not.
  kill(d0_again, SIGKILL);
  const pid_t d0_third = restarted("d0", 2);
  ASSERT_NE(d0_third, 0);
  kill(d0_third, SIGKILL);
  ASSERT_TRUE(pdserve::testing::PollUntil(
      [&] {
        for (const SupervisionEvent& e : ReadEvents(run, 0))
          if (e.process == "d0" && e.event == "gave_up") return true;
        return false;
      },
      absl::Seconds(30)));
  absl::SleepFor(absl::Milliseconds(500));  // Several polls: nothing starts it again.
  state = ClusterState::Read(ClusterState::PathIn(run));
  ASSERT_TRUE(state.ok());
  EXPECT_FALSE(ProcessRuns(state->processes[2].pid, "pdserve-decode"));
  EXPECT_EQ(state->processes[2].restarts, 2);
  // The old logs are kept beside the new one.
  EXPECT_TRUE(std::filesystem::exists(run + "/d0.log.0"));
  EXPECT_TRUE(std::filesystem::exists(run + "/router.log.0"));

  ASSERT_EQ(Pdctl({"status", "-f", yaml}, &log), 0) << log;
  EXPECT_TRUE(absl::StrContains(log, "restarts: router=1 p0=0 d0=2")) << log;
  EXPECT_TRUE(absl::StrContains(log, "gave_up")) << log;
  EXPECT_TRUE(absl::StrContains(log, "killed by signal 9")) << log;

  const pid_t supervisor = state->supervisor_pid;
  ASSERT_EQ(Pdctl({"down", "-f", yaml, "--grace=10s"}, &log), 0) << log;
  EXPECT_TRUE(absl::StrContains(log, "stopped the supervisor")) << log;
  EXPECT_FALSE(ProcessRuns(supervisor, "pdctl"));
  for (const ProcessState& p : state->processes)
    EXPECT_FALSE(ProcessRuns(p.pid, p.binary)) << p.name;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pdserve::pdctl
