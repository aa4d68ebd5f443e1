// More than one router (router.replicas > 1 in the Helm chart): workers register with every
// router their --router names, so each router can place requests on every worker; and the
// probes tell the truth: a router is not ready until a decode worker has registered with it,
// a worker is not ready while no router knows it, and neither fails liveness meanwhile.
// Real processes on 127.0.0.1; pdctl reads each router's view as an operator would.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/net_address.h"
#include "gtest/gtest.h"
#include "server/child_process.h"
#include "server/health_client.h"
#include "tests/testing/http_client.h"
#include "tests/testing/poll.h"
#include "tests/testing/test_models.h"
#include "tools/client/generation_client.h"

namespace pdserve {
namespace {

using testing::PollUntil;

std::unique_ptr<ChildProcess> Start(const std::string& binary, std::vector<std::string> args) {
  auto child = ChildProcess::Start(ChildOptions{.binary = binary, .args = std::move(args)});
  EXPECT_TRUE(child.ok()) << binary << ": " << child.status();
  if (!child.ok()) return nullptr;
  EXPECT_TRUE((*child)->WaitHealthy(absl::Seconds(30)).ok()) << (*child)->Log();
  return *std::move(child);
}

HealthState Probe(const ChildProcess& process, const std::string& service) {
  auto state = CheckHealth(process.grpc_address(), absl::Seconds(5), GrpcSecurity(), service);
  return state.ok() ? *state : HealthState::kUnknown;
}

std::vector<std::string> RouterArgs() {
  return {"--model=" + testing::TestModelDir("tiny"), "--drain_timeout=5s", "--worker_timeout=1s",
          "--policy=always_offload"};
}

std::vector<std::string> WorkerArgs(const std::string& routers, const std::string& id) {
  return {"--model=" + testing::TestModelDir("tiny"),
          "--threads=1",
          "--kv_cache_bytes=67108864",
          "--ucx_transports=shm",
          "--drain_timeout=5s",
          "--router=" + routers,
          "--worker_id=" + id};
}

// What `pdctl status` prints for a router.
std::string PdctlStatus(const ChildProcess& router) {
  auto pdctl =
      ChildProcess::Start(ChildOptions{.binary = "pdctl",
                                       .args = {"status", "--router=" + router.grpc_address()},
                                       .expect_serving_info = false});
  if (!pdctl.ok()) return "";
  (*pdctl)->WaitExit(absl::Seconds(20));
  return (*pdctl)->Log();
}

TEST(MultiRouterTest, WorkersRegisterWithEveryRouterAndProbesTellTheTruth) {
  auto router_a = Start("pdserve-router", RouterArgs());
  auto router_b = Start("pdserve-router", RouterArgs());
  ASSERT_TRUE(router_a && router_b);
  // No decode worker yet: alive, serving its own health, but not ready for clients.
  for (ChildProcess* router : {router_a.get(), router_b.get()}) {
    EXPECT_EQ(Probe(*router, "pdserve.live"), HealthState::kServing);
    EXPECT_EQ(Probe(*router, "pdserve.ready"), HealthState::kNotServing);
  }

  const std::string both = router_a->grpc_address() + "," + router_b->grpc_address();
  auto prefill = Start("pdserve-prefill", WorkerArgs(both, "prefill-0"));
  auto decode = Start("pdserve-decode", WorkerArgs(both, "decode-0"));
  ASSERT_TRUE(prefill && decode);
  // Registered with both: both routers become ready, and so does each worker.
  ASSERT_TRUE(PollUntil(
      [&] {
        return Probe(*router_a, "pdserve.ready") == HealthState::kServing &&
               Probe(*router_b, "pdserve.ready") == HealthState::kServing &&
               Probe(*decode, "pdserve.ready") == HealthState::kServing &&
               Probe(*prefill, "pdserve.ready") == HealthState::kServing;
      },
      absl::Seconds(20), absl::Milliseconds(50)))
      << router_a->Log() << decode->Log();
  // Each router knows both workers (as pdctl shows) and offloads through them.
  for (ChildProcess* router : {router_a.get(), router_b.get()}) {
    std::string status;
    EXPECT_TRUE(PollUntil(
        [&] {
          status = PdctlStatus(*router);
          return absl::StrContains(status, "decode-0") && absl::StrContains(status, "prefill-0");
        },
        absl::Seconds(10), absl::Milliseconds(100)))
        << status;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back(3 + i % 50);
    const auto out =
        client::CallGenerate(client::MakeChannel(router->grpc_address(), GrpcSecurity()),
                             client::MakeRequest(prompt, 4), absl::Seconds(60));
    ASSERT_TRUE(out.status.ok()) << out.status.error_message();
    EXPECT_EQ(out.tokens.size(), 4u);
  }
  EXPECT_EQ(testing::Metric(decode->metrics_address(), "pdserve_registered_routers"), 2);

  // Router A goes away: the workers stay ready with B, which still serves.
  ASSERT_TRUE(router_a->Stop(SIGKILL, absl::Seconds(10)).ok());
  ASSERT_TRUE(PollUntil(
      [&] { return testing::Metric(decode->metrics_address(), "pdserve_registered_routers") == 1; },
      absl::Seconds(10), absl::Milliseconds(50)));
  EXPECT_EQ(Probe(*decode, "pdserve.ready"), HealthState::kServing);
  const auto out =
      client::CallGenerate(client::MakeChannel(router_b->grpc_address(), GrpcSecurity()),
                           client::MakeRequest({5, 6, 7}, 3), absl::Seconds(30));
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();

  // The decode worker drains: B stops being ready once no decode worker is left, while it
  // stays alive.
  ASSERT_TRUE(decode->Stop(SIGTERM, absl::Seconds(15)).ok());
  EXPECT_TRUE(
      PollUntil([&] { return Probe(*router_b, "pdserve.ready") == HealthState::kNotServing; },
                absl::Seconds(10), absl::Milliseconds(50)));
  EXPECT_EQ(Probe(*router_b, "pdserve.live"), HealthState::kServing);
}

// A worker that cannot reach any router says so: not ready, a 0 gauge and a warning, while
// alive (restarting it would not help).
TEST(MultiRouterTest, AWorkerWithoutARouterIsAliveButNotReady) {
  const int nobody = PickFreeLoopbackPort();
  auto decode = Start("pdserve-decode", WorkerArgs(absl::StrCat("127.0.0.1:", nobody), "lonely"));
  ASSERT_TRUE(decode);
  EXPECT_EQ(Probe(*decode, "pdserve.live"), HealthState::kServing);
  EXPECT_EQ(Probe(*decode, "pdserve.ready"), HealthState::kNotServing);
  EXPECT_EQ(Probe(*decode, ""), HealthState::kServing);  // Its own service works.
  EXPECT_EQ(testing::Metric(decode->metrics_address(), "pdserve_registered_routers"), 0);
}

// A bad --router is refused at start, naming the flag, rather than retried forever.
TEST(MultiRouterTest, AMalformedRouterListIsRefusedAtStart) {
  auto bad = ChildProcess::Start(ChildOptions{.binary = "pdserve-decode",
                                              .args = WorkerArgs("127.0.0.1:1,nonsense", "bad"),
                                              .expect_serving_info = false});
  ASSERT_TRUE(bad.ok());
  const auto status = (*bad)->WaitExit(absl::Seconds(30));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0);
  EXPECT_TRUE(absl::StrContains((*bad)->Log(), "--router")) << (*bad)->Log();
}

}  // namespace
}  // namespace pdserve
