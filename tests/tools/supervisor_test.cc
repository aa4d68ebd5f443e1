// The supervisor's decisions without processes: when a process that exited is started again
// (backoff doubling while it keeps failing, a budget per window that frees up as the window
// moves), the flags a router restarts with (its own addresses, not port 0), the command a
// process runs under (kept through the cluster file), and the events file (appended, read
// back in order, a torn line skipped).
#include "tools/pdctl/supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tools/pdctl/cluster_config.h"
#include "tools/pdctl/cluster_launcher.h"

namespace pdserve::pdctl {
namespace {

constexpr absl::Time kStart = absl::FromUnixSeconds(1'000'000);

SupervisionPolicy Policy() {
  SupervisionPolicy p;
  p.backoff_initial = absl::Seconds(1);
  p.backoff_max = absl::Seconds(5);
  p.max_restarts = 4;
  p.window = absl::Minutes(1);
  return p;
}

TEST(RestartBudgetTest, BackoffDoublesUpToItsMaximumAndTheBudgetRunsOut) {
  RestartBudget budget(Policy());
  absl::Time now = kStart;
  // 1 s, 2 s, 4 s, then capped at 5 s; the fifth exit within the minute is refused.
  for (const absl::Duration expected :
       {absl::Seconds(1), absl::Seconds(2), absl::Seconds(4), absl::Seconds(5)}) {
    const std::optional<absl::Time> next = budget.NextAttempt(now);
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(*next - now, expected);
    budget.Attempted(*next);
    now = *next + absl::Seconds(1);
  }
  EXPECT_FALSE(budget.NextAttempt(now).has_value());
  EXPECT_EQ(budget.attempts_in_window(now), 4);
  // Once the window has passed the first attempts, restarts are allowed again, and the
  // backoff starts over with the attempts still inside it.
  const absl::Time later = kStart + absl::Minutes(1) + absl::Seconds(2);
  ASSERT_TRUE(budget.NextAttempt(later).has_value());
  EXPECT_EQ(budget.attempts_in_window(later), 3);
  EXPECT_EQ(*budget.NextAttempt(later) - later, absl::Seconds(5));
}

TEST(RestartBudgetTest, ABudgetOfZeroNeverRestarts) {
  SupervisionPolicy p = Policy();
  p.max_restarts = 0;
  RestartBudget budget(p);
  EXPECT_FALSE(budget.NextAttempt(kStart).has_value());
}

TEST(SupervisionPolicyTest, BadSettingsAreRefusedNamingTheFlag) {
  struct Case {
    void (*change)(SupervisionPolicy*);
    std::string names;
  };
  for (const Case& c :
       {Case{[](SupervisionPolicy* p) { p->backoff_initial = absl::ZeroDuration(); },
             "--restart_backoff"},
        Case{[](SupervisionPolicy* p) { p->backoff_max = absl::Milliseconds(1); },
             "--restart_backoff_max"},
        Case{[](SupervisionPolicy* p) { p->max_restarts = -1; }, "--max_restarts"},
        Case{[](SupervisionPolicy* p) { p->window = -absl::Seconds(1); }, "--restart_window"}}) {
    SupervisionPolicy p = Policy();
    c.change(&p);
    const absl::Status s = p.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.names;
    EXPECT_NE(s.message().find(c.names), std::string::npos) << s;
  }
  EXPECT_TRUE(Policy().Validate().ok());
}

TEST(SupervisorTest, ARouterRestartsAtTheAddressesItHad) {
  ClusterState state;
  state.registry = "127.0.0.1:4001";
  state.router_http = "127.0.0.1:4002";
  ProcessState router;
  router.role = "router";
  router.grpc = "127.0.0.1:4000";
  router.metrics = "127.0.0.1:4003";
  router.args = {"--model=m",     "--listen=127.0.0.1:0",          "--metrics_listen=127.0.0.1:0",
                 "--policy=auto", "--registry_listen=127.0.0.1:0", "--http_listen=127.0.0.1:0"};
  EXPECT_EQ(
      RouterRestartArgs(state, router),
      (std::vector<std::string>{
          "--model=m", "--listen=127.0.0.1:4000", "--metrics_listen=127.0.0.1:4003",
          "--policy=auto", "--registry_listen=127.0.0.1:4001", "--http_listen=127.0.0.1:4002"}));
}

// A process started under a command (another network namespace, numactl) is started again
// under it: the prefix goes through the cluster file and comes first on the command line, the
// binary's full path after it.
TEST(SupervisorTest, AProcessRunsAgainUnderTheCommandItWasStartedUnder) {
  auto config = ParseClusterConfig(R"(
decode:
  - name: decode-0
    exec_prefix: [/usr/sbin/ip, netns, exec, host-3]
    flags: [--num_blocks=64]
)",
                                   "cluster.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->decode.size(), 1u);
  EXPECT_EQ(config->decode[0].exec_prefix,
            (std::vector<std::string>{"/usr/sbin/ip", "netns", "exec", "host-3"}));

  const std::string dir =
      std::filesystem::temp_directory_path() / absl::StrCat("pdctl-prefix-", getpid());
  std::filesystem::create_directories(dir);
  ClusterState state;
  ProcessState p;
  p.name = "decode-0";
  p.role = "decode";
  p.binary = "pdserve-decode";
  p.args = {"--model=m", "--num_blocks=64"};
  p.exec_prefix = config->decode[0].exec_prefix;
  state.processes.push_back(p);
  ASSERT_TRUE(state.Write(ClusterState::PathIn(dir)).ok());
  auto read = ClusterState::Read(ClusterState::PathIn(dir));
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->processes.size(), 1u);
  EXPECT_EQ(read->processes[0].exec_prefix, p.exec_prefix);

  const ChildOptions under = ProcessChildOptions(read->processes[0], dir, /*detached=*/true,
                                                 absl::Seconds(5), GrpcSecurity());
  EXPECT_EQ(under.binary, "/usr/sbin/ip");
  EXPECT_EQ(under.args,
            (std::vector<std::string>{"netns", "exec", "host-3", BinaryPath("pdserve-decode"),
                                      "--model=m", "--num_blocks=64"}));
  EXPECT_TRUE(under.detached);
  EXPECT_EQ(under.name, "decode-0");
  // Without a prefix: the binary itself, its flags as they were.
  p.exec_prefix.clear();
  const ChildOptions direct =
      ProcessChildOptions(p, dir, /*detached=*/false, absl::Seconds(5), GrpcSecurity());
  EXPECT_EQ(direct.binary, "pdserve-decode");
  EXPECT_EQ(direct.args, p.args);
  std::filesystem::remove_all(dir);
}

// A supervisor running inside another program (pdserve-bench chaos) waits only for the
// cluster's processes: the program's own children (tc, clang, openssl through std::system)
// keep their exit status. Waiting for any child took it, and std::system failed with ECHILD.
TEST(SupervisorTest, TheHostProgramsOwnChildrenAreNotReaped) {
  const std::string dir =
      std::filesystem::temp_directory_path() / absl::StrCat("pdctl-reap-", getpid());
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(ClusterState().Write(ClusterState::PathIn(dir)).ok());
  SupervisionPolicy policy = Policy();
  policy.poll = absl::Microseconds(100);  // Reaping as often as it can.
  ShutdownSignal stop;
  absl::Status ran;
  std::thread supervisor([&] { ran = Supervisor(dir, policy).Run(stop); });
  int failed = 0;
  for (int i = 0; i < 200; ++i) failed += std::system("true") == 0 ? 0 : 1;
  stop.Trigger();
  supervisor.join();
  EXPECT_TRUE(ran.ok()) << ran;
  EXPECT_EQ(failed, 0) << "the supervisor took the exit status of the program's own children";
  std::filesystem::remove_all(dir);
}

// The state a restart writes back names the supervisor. `pdctl up` records the supervisor's
// pid after starting it, so the supervisor may read the file before the pid is in it; its
// restarts wrote the file back without it, and `pdctl down` then left the supervisor running.
TEST(SupervisorTest, TheStateARestartWritesNamesTheSupervisor) {
  const std::string dir =
      std::filesystem::temp_directory_path() / absl::StrCat("pdctl-names-", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // A process that exited: a child of this test, reaped.
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  ASSERT_GT(gone, 0);
  ASSERT_EQ(waitpid(gone, nullptr, 0), gone);
  ClusterState state;  // As `pdctl up` first writes it: no supervisor_pid yet.
  ProcessState p;
  p.name = "stand-in";
  p.role = "decode";
  p.binary = "/bin/sh";
  p.pid = gone;
  // Started again, it writes its serving info (the last argument) and waits; it serves no
  // health check, so the restart then fails, after the state was written.
  p.args = {"-c",
            "for a; do case $a in --serving_info_path=*) echo grpc=127.0.0.1:1 >\"${a#*=}\";; "
            "esac; done; exec sleep 60",
            "sh"};
  state.processes.push_back(p);
  ASSERT_TRUE(state.Write(ClusterState::PathIn(dir)).ok());
  SupervisionPolicy policy = Policy();
  policy.backoff_initial = absl::Milliseconds(10);
  policy.poll = absl::Milliseconds(10);
  policy.startup_timeout = absl::Milliseconds(200);
  ShutdownSignal stop;
  absl::Status ran;
  std::thread supervisor([&] { ran = Supervisor(dir, policy).Run(stop); });
  absl::StatusOr<ClusterState> written;
  for (int i = 0; i < 500; ++i) {
    written = ClusterState::Read(ClusterState::PathIn(dir));
    if (written.ok() && written->processes.size() == 1 && written->processes[0].restarts > 0) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  stop.Trigger();
  supervisor.join();
  EXPECT_TRUE(ran.ok()) << ran;
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_EQ(written->processes.size(), 1u);
  ASSERT_GT(written->processes[0].restarts, 0) << "the supervisor did not restart the process";
  EXPECT_EQ(written->supervisor_pid, getpid());
  // The restarted stand-ins (detached): stopped.
  const absl::StatusOr<ClusterState> last = ClusterState::Read(ClusterState::PathIn(dir));
  if (last.ok()) {
    for (const ProcessState& q : last->processes)
      if (q.pid > 0 && q.pid != gone) kill(q.pid, SIGKILL);
  }
  std::filesystem::remove_all(dir);
}

TEST(SupervisorTest, EventsAreAppendedAndReadBackInOrder) {
  const std::string dir =
      std::filesystem::temp_directory_path() / absl::StrCat("pdctl-events-", getpid());
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(ReadEvents(dir, 0).empty());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(AppendEvent(dir, {kStart + absl::Seconds(i), absl::StrCat("p", i), "restarted",
                                  absl::StrCat("pid ", 100 + i)})
                    .ok());
  }
  std::ofstream(EventsPathIn(dir), std::ios::app) << "{\"time\": \"cut";  // A torn last line.
  const std::vector<SupervisionEvent> last = ReadEvents(dir, 2);
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[0].process, "p3");
  EXPECT_EQ(last[1].process, "p4");
  EXPECT_EQ(last[1].detail, "pid 104");
  EXPECT_EQ(last[1].time, kStart + absl::Seconds(4));
  EXPECT_EQ(ReadEvents(dir, 0).size(), 5u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pdserve::pdctl
