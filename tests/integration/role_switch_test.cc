// Live role changes (label "fault"): workers started with --role_switching change role while
// streams run on them. Every stream completes with the tokens it would have had; the worker
// registers in its new role and serves it (an offload lands on it); the router refuses a
// switch that would leave a role empty, one to the role a worker has, and one for a worker it
// does not know; a switch back from prefill waits for the prefill it is computing.
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "pdserve/v1/registry.grpc.pb.h"
#include "tests/integration/background_call.h"
#include "tests/integration/fault_check.h"
#include "tests/testing/greedy_reference.h"
#include "tests/testing/http_client.h"
#include "tests/testing/test_models.h"
#include "tools/client/generation_client.h"

namespace pdserve::testing {
namespace {

grpc::Status SwitchRole(const LocalCluster& cluster, const std::string& worker_id,
                        v1::WorkerRole role, std::string* message = nullptr) {
  auto stub = v1::Registry::NewStub(
      grpc::CreateChannel(cluster.registry_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::SwitchRoleRequest request;
  request.set_worker_id(worker_id);
  request.set_role(role);
  v1::SwitchRoleResponse response;
  grpc::Status status = stub->SwitchRole(&context, request, &response);
  if (message != nullptr) *message = response.message();
  return status;
}

// The worker's role as the router lists it, once it reports and is not switching.
bool WaitForRole(const LocalCluster& cluster, const std::string& worker_id, v1::WorkerRole role) {
  return cluster.WaitForStatus(
      [&](const v1::ClusterStatus& s) {
        for (const v1::WorkerStatus& w : s.workers()) {
          if (w.registration().worker_id() == worker_id) {
            return w.registration().role() == role && !w.switching() && !w.load().draining() &&
                   w.load().sequence() > 0;  // Reported in its new role.
          }
        }
        return false;
      },
      absl::Seconds(30));
}

v1::GenerateRequest LongRequest(const std::vector<int32_t>& prompt, int tokens) {
  v1::GenerateRequest r = client::MakeRequest(prompt, tokens);
  r.mutable_sampling()->set_ignore_eos(true);
  return r;
}

TEST(RoleSwitchTest, WorkersChangeRoleUnderLoadLosingNothingAndTheRouterKeepsEveryRole) {
  auto cluster = LocalCluster::Start(
      ClusterOptions{.prefill_workers = 0,
                     .decode_workers = 3,
                     .router_flags = {"--policy=always_offload"},
                     .decode_flags = {"--role_switching", "--layer_delay=200ms"}});
  ASSERT_NE(cluster, nullptr);
  GreedyReference reference;
  std::mt19937 rng(29);
  ChildProcess& victim = *cluster->decode()[1];

  // Streams on the decode workers (none is offloaded: there is no prefill worker yet).
  constexpr int kTokens = 160;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::unique_ptr<BackgroundCall>> calls;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(reference.RandomPrompt(rng, 24));
    calls.push_back(
        std::make_unique<BackgroundCall>(cluster->channel(), LongRequest(prompts.back(), kTokens)));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (LocalCluster::DecodeStats(victim).running() == 0 && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(10));
  ASSERT_GT(LocalCluster::DecodeStats(victim).running(), 0u) << "no stream reached decode-1";

  std::string message;
  const grpc::Status ordered = SwitchRole(*cluster, "decode-1", v1::WORKER_ROLE_PREFILL, &message);
  ASSERT_TRUE(ordered.ok()) << ordered.error_message();
  EXPECT_TRUE(absl::StrContains(message, "decode-1")) << message;
  // A worker switching already is not ordered again.
  grpc::Status refused = SwitchRole(*cluster, "decode-1", v1::WORKER_ROLE_PREFILL);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "in progress")) << refused.error_message();
  // Nothing new goes to the switching worker.
  {
    const std::vector<int32_t> prompt = reference.RandomPrompt(rng, 16);
    const auto out =
        client::CallGenerate(cluster->channel(), client::MakeRequest(prompt, 4), absl::Seconds(60));
    ASSERT_TRUE(out.status.ok()) << out.status.error_message();
    EXPECT_NE(out.result.placement().decode_worker_id(), "decode-1");
    EXPECT_EQ(out.tokens, reference.Generate(prompt, 4));
  }
  // Every stream that ran there completes, with its own tokens.
  for (size_t i = 0; i < calls.size(); ++i) {
    const auto& out = calls[i]->Join();
    ASSERT_TRUE(out.status.ok()) << "stream " << i << ": " << out.status.error_message();
    EXPECT_EQ(out.tokens, reference.Generate(prompts[i], kTokens)) << "stream " << i;
  }
  ASSERT_TRUE(WaitForRole(*cluster, "decode-1", v1::WORKER_ROLE_PREFILL))
      << cluster->Status().DebugString();
  EXPECT_EQ(Metric(victim.metrics_address(), "pdserve_worker_role{role=\"prefill\"}"), 1);
  ASSERT_TRUE(SwitchRole(*cluster, "decode-2", v1::WORKER_ROLE_PREFILL).ok());
  ASSERT_TRUE(WaitForRole(*cluster, "decode-2", v1::WORKER_ROLE_PREFILL))
      << cluster->Status().DebugString();

  // Refusals, each saying why: decode-0 is the last decode worker now.
  refused = SwitchRole(*cluster, "decode-0", v1::WORKER_ROLE_PREFILL);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "last decode worker"))
      << refused.error_message();
  refused = SwitchRole(*cluster, "decode-1", v1::WORKER_ROLE_PREFILL);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "already")) << refused.error_message();
  refused = SwitchRole(*cluster, "nobody", v1::WORKER_ROLE_DECODE);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "nobody")) << refused.error_message();
  refused = SwitchRole(*cluster, "decode-1", v1::WORKER_ROLE_UNSPECIFIED);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "role")) << refused.error_message();

  // The new prefill workers serve offloads; the one computing an offload, told to switch back,
  // finishes it first (the request is offloaded, not fallen back).
  const std::vector<int32_t> offloaded = reference.RandomPrompt(rng, 120);
  BackgroundCall during(cluster->channel(), client::MakeRequest(offloaded, 6));
  std::string busy;
  const absl::Time found_by = absl::Now() + absl::Seconds(20);
  while (busy.empty() && absl::Now() < found_by) {
    for (int i : {1, 2}) {
      if (Metric(cluster->decode()[i]->metrics_address(), "pdserve_kv_transfer_layers_total") >= 1)
        busy = "decode-" + std::to_string(i);
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_FALSE(busy.empty()) << "no prefill worker took the offload";
  const grpc::Status back = SwitchRole(*cluster, busy, v1::WORKER_ROLE_DECODE);
  ASSERT_TRUE(back.ok()) << back.error_message();
  const auto& out = during.Join();
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  const v1::Placement& p = out.result.placement();
  EXPECT_EQ(p.mode(), v1::PLACEMENT_MODE_OFFLOAD) << p.DebugString();
  EXPECT_FALSE(p.fell_back_to_local()) << p.DebugString();
  EXPECT_EQ(p.prefill_worker_id(), busy) << p.DebugString();
  EXPECT_EQ(out.tokens, reference.Generate(offloaded, 6));

  ASSERT_TRUE(WaitForRole(*cluster, busy, v1::WORKER_ROLE_DECODE))
      << cluster->Status().DebugString();
  ASSERT_TRUE(cluster->WaitForWorkers(2, 1, absl::Seconds(10)));
  const std::string router_metrics = cluster->router().metrics_address();
  EXPECT_TRUE(WaitForMetricAtLeast(
      router_metrics, "pdserve_router_role_switches_total{outcome=\"completed\",to=\"decode\"}",
      1));
  EXPECT_TRUE(WaitForMetricAtLeast(
      router_metrics, "pdserve_router_role_switches_total{outcome=\"completed\",to=\"prefill\"}",
      2));
  // Back in its first role, with its pool whole: the cluster serves as before.
  for (int i = 0; i < 3; ++i) {
    const std::vector<int32_t> prompt = reference.RandomPrompt(rng, 40);
    const auto after =
        client::CallGenerate(cluster->channel(), client::MakeRequest(prompt, 5), absl::Seconds(60));
    ASSERT_TRUE(after.status.ok()) << after.status.error_message();
    EXPECT_EQ(after.tokens, reference.Generate(prompt, 5));
  }
  ExpectClusterAtBaseline(*cluster);
}

// A decode worker leaving the decode role hands back what has not started: an offload whose
// KV a slow prefill worker has not delivered goes back to the router, which places it on
// another decode worker, where it completes with its own tokens; the switch does not wait for
// that prefill.
TEST(RoleSwitchTest, ASwitchingWorkerHandsBackAnOffloadAwaitingItsKvAndItCompletesElsewhere) {
  auto cluster = LocalCluster::Start(
      ClusterOptions{.prefill_workers = 1,
                     .decode_workers = 3,
                     .router_flags = {"--policy=always_offload"},
                     .decode_flags = {"--role_switching"},
                     .prefill_flags = {"--layer_delay=3s"}});  // 4 layers: 12 s a prefill.
  ASSERT_NE(cluster, nullptr);
  GreedyReference reference;
  std::mt19937 rng(37);
  const std::vector<int32_t> prompt = reference.RandomPrompt(rng, 40);
  BackgroundCall call(cluster->channel(), client::MakeRequest(prompt, 4));
  int holder = -1;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (holder < 0 && absl::Now() < deadline) {
    for (int i = 0; i < 3; ++i) {
      if (LocalCluster::DecodeStats(*cluster->decode()[i]).awaiting_kv() > 0) holder = i;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GE(holder, 0) << "no decode worker awaits the offload's KV";
  const std::string victim = "decode-" + std::to_string(holder);
  const absl::Time ordered = absl::Now();
  ASSERT_TRUE(SwitchRole(*cluster, victim, v1::WORKER_ROLE_PREFILL).ok());
  ASSERT_TRUE(WaitForRole(*cluster, victim, v1::WORKER_ROLE_PREFILL))
      << cluster->Status().DebugString();
  const absl::Duration switched = absl::Now() - ordered;

  const auto& out = call.Join();
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens, reference.Generate(prompt, 4));
  EXPECT_NE(out.result.placement().decode_worker_id(), victim)
      << out.result.placement().DebugString();
  EXPECT_EQ(
      Metric(cluster->decode()[holder]->metrics_address(), "pdserve_requests_handed_back_total"),
      1);
  EXPECT_EQ(
      Metric(cluster->router().metrics_address(), "pdserve_router_requests_handed_back_total"), 1);
  // Waiting for the prefill would have taken the rest of its four 3-s layers (sleeps, not
  // compute: the same on any machine); the worker waits only for the prefill worker to stop
  // writing, at its next layer.
  EXPECT_LT(switched, absl::Seconds(9)) << switched;
  ExpectClusterAtBaseline(*cluster);
}

// --rebalance=on: with prompts backing up (a TTFT objective of 1 ms makes any backlog a
// shortage) and the streams far inside the TPOT objective, the router's planner moves a
// role-switching decode worker to prefill by itself, keeps a decode worker, and every request
// meanwhile gets its own tokens.
TEST(RoleSwitchTest, TheRoutersPlannerMovesAWorkerToTheShortRole) {
  auto cluster = LocalCluster::Start(ClusterOptions{
      .prefill_workers = 1,
      .decode_workers = 3,
      .router_flags = {"--rebalance=on", "--rebalance_interval=100ms", "--rebalance_confirm=2",
                       "--rebalance_min_between=1s", "--slo_ttft=1ms", "--slo_tpot=10s"},
      .decode_flags = {"--role_switching", "--max_num_batched_tokens=64"},
      .prefill_flags = {"--layer_delay=20ms"}});
  ASSERT_NE(cluster, nullptr);
  GreedyReference reference;
  std::mt19937 rng(31);
  const std::string router_metrics = cluster->router().metrics_address();
  const std::string completed =
      "pdserve_router_role_switches_total{outcome=\"completed\",to=\"prefill\"}";
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  int sent = 0;
  while (Metric(router_metrics, completed) < 1 && absl::Now() < deadline) {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::unique_ptr<BackgroundCall>> calls;
    for (int i = 0; i < 6; ++i) {
      prompts.push_back(reference.RandomPrompt(rng, 600));
      calls.push_back(std::make_unique<BackgroundCall>(cluster->channel(),
                                                       client::MakeRequest(prompts.back(), 2)));
    }
    for (size_t i = 0; i < calls.size(); ++i) {
      const auto& out = calls[i]->Join();
      ASSERT_TRUE(out.status.ok()) << out.status.error_message();
      EXPECT_EQ(out.tokens, reference.Generate(prompts[i], 2));
      ++sent;
    }
  }
  ASSERT_GE(Metric(router_metrics, completed), 1) << "no switch after " << sent << " requests";
  const v1::ClusterStatus status = cluster->Status();
  int decode = 0;
  for (const v1::WorkerStatus& w : status.workers())
    decode += w.registration().role() == v1::WORKER_ROLE_DECODE ? 1 : 0;
  EXPECT_GE(decode, 1) << status.DebugString();
  ExpectClusterAtBaseline(*cluster);
}

TEST(RoleSwitchTest, BadFlagsAreRefusedAtStartNamingTheFlag) {
  const std::vector<std::string> base = {"--model=" + TestModelDir("tiny"), "--ucx_transports=shm"};
  auto run = [&](std::vector<std::string> flags) {
    flags.insert(flags.begin(), base.begin(), base.end());
    return RunUntilExit("pdserve-decode", flags);
  };
  auto [code, log] = run({"--role=prefill"});
  EXPECT_EQ(code, 2);
  EXPECT_TRUE(absl::StrContains(log, "--role: only with --role_switching")) << log;
  std::tie(code, log) = run({"--role_switching", "--role=router"});
  EXPECT_EQ(code, 2);
  EXPECT_TRUE(absl::StrContains(log, "--role: must be decode or prefill")) << log;
  std::tie(code, log) = run({"--role_switching", "--kv_transport=none"});
  EXPECT_EQ(code, 2);
  EXPECT_TRUE(absl::StrContains(log, "--role_switching needs --kv_transport=ucx")) << log;
  std::tie(code, log) = run({"--role_switching", "--switch_drain_timeout=0s"});
  EXPECT_EQ(code, 2);
  EXPECT_TRUE(absl::StrContains(log, "--switch_drain_timeout: must be positive")) << log;
}

}  // namespace
}  // namespace pdserve::testing
