// Starts a real server binary as a child process: its health goes SERVING once ready, its
// /metrics answers, and SIGTERM drains it to a clean exit.
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "gtest/gtest.h"
#include "server/child_process.h"
#include "server/health_client.h"
#include "tests/testing/http_client.h"

namespace pdserve {
namespace {

TEST(ServerLifecycleTest, HealthThenSigtermExitsCleanly) {
  auto child = ChildProcess::Start(
      ChildOptions{.binary = "pdserve-test-server", .args = {"--ready_delay=300ms"}});
  ASSERT_TRUE(child.ok()) << child.status();
  // Listening but not ready yet: NOT_SERVING.
  auto early = CheckHealth((*child)->grpc_address(), absl::Seconds(2));
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(*early, HealthState::kNotServing);
  ASSERT_TRUE((*child)->WaitHealthy(absl::Seconds(10)).ok()) << (*child)->Log();

  auto metrics = testing::HttpGet((*child)->metrics_address(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_NE(metrics->body.find("pdserve_test_server_starts_total 1"), std::string::npos);

  auto status = (*child)->Stop(SIGTERM, absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status)) << (*child)->Log();
  EXPECT_EQ(WEXITSTATUS(*status), 0) << (*child)->Log();
  EXPECT_NE((*child)->Log().find("drained"), std::string::npos);
}

TEST(ServerLifecycleTest, DestructorStopsAChildThatIsStillRunning) {
  pid_t pid = 0;
  {
    auto child = ChildProcess::Start(ChildOptions{.binary = "pdserve-test-server"});
    ASSERT_TRUE(child.ok()) << child.status();
    pid = (*child)->pid();
    EXPECT_EQ(::kill(pid, 0), 0);
  }
  // Reaped by the destructor: the pid no longer names our child.
  EXPECT_NE(::kill(pid, 0), 0);
}

TEST(ServerLifecycleTest, ChildRunsOnTheGivenCpusAtTheGivenNiceness) {
  ChildOptions options{.binary = "pdserve-test-server"};
  options.cpus = {0};
  options.nice = 7;
  auto child = ChildProcess::Start(options);
  ASSERT_TRUE(child.ok()) << child.status();
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, (*child)->pid());
  ASSERT_EQ(errno, 0);
  EXPECT_EQ(nice, getpriority(PRIO_PROCESS, 0) + 7);
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity((*child)->pid(), sizeof(set), &set), 0);
  EXPECT_EQ(CPU_COUNT(&set), 1);
  EXPECT_TRUE(CPU_ISSET(0, &set));
}

TEST(ServerLifecycleTest, HelpExitsZeroAndBadFlagsFail) {
  auto help = ChildProcess::Start(ChildOptions{
      .binary = "pdserve-test-server", .args = {"--help"}, .expect_serving_info = false});
  ASSERT_TRUE(help.ok());
  auto status = (*help)->WaitExit(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_NE((*help)->Log().find("--listen"), std::string::npos) << (*help)->Log();

  auto bad = ChildProcess::Start(ChildOptions{
      .binary = "pdserve-test-server", .args = {"--listen=nope"}, .expect_serving_info = false});
  ASSERT_TRUE(bad.ok());
  status = (*bad)->WaitExit(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_NE(WEXITSTATUS(*status), 0);
  EXPECT_NE((*bad)->Log().find("listen_address"), std::string::npos) << (*bad)->Log();
}

}  // namespace
}  // namespace pdserve
