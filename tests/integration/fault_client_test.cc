// Fault suite (label "fault"): clients that misbehave. One that stops reading once held its
// KV blocks and batch slot for as long as it stayed connected; now it is ended after
// --max_client_stall and everything it held goes back.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/fault_check.h"
#include "tests/testing/http_client.h"
#include "tools/client/generation_client.h"

namespace pdserve::testing {
namespace {

TEST(ClientFaultTest, AClientThatStopsReadingIsEndedAndFreesItsBlocks) {
  auto cluster = LocalCluster::Start(ClusterOptions{
      .prefill_workers = 0, .decode_workers = 1, .decode_flags = {"--max_client_stall=1s"}});
  ASSERT_NE(cluster, nullptr);
  ChildProcess& worker = *cluster->decode()[0];
  // Straight to the decode worker, with a small flow-control window (as a client on a
  // constrained link has): what the client does not read backs up into the worker.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 4096);
  auto stub = v1::Decode::NewStub(
      grpc::CreateCustomChannel(worker.grpc_address(), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  v1::DecodeRequest request;
  *request.mutable_request() = client::MakeRequest({1, 2, 3, 4, 5}, 4000);
  request.mutable_request()->mutable_sampling()->set_ignore_eos(true);
  auto reader = stub->Generate(&context, request);  // Never read.
  // The worker ends it once the stall lasted a second, and counts it.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool ended = false;
  while (!ended && absl::Now() < deadline) {
    auto page = HttpGet(worker.metrics_address(), "/metrics");
    ended = page.ok() &&
            absl::StrContains(page->body, "pdserve_stalled_clients_total{model_name=\"tiny\"} 1");
    if (!ended) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(ended) << LocalCluster::DecodeStats(worker).DebugString();
  EXPECT_TRUE(LocalCluster::WaitForBaseline(worker, absl::Seconds(5)))
      << LocalCluster::DecodeStats(worker).DebugString();
  context.TryCancel();
  reader->Finish().IgnoreError();
  ExpectClusterAtBaseline(*cluster);
}

// Every client with gRPC's client-side health checking keeps a grpc.health Watch stream
// open. Such a stream once held a draining worker for its whole drain timeout, so that
// `pdctl down` (same grace) killed it. The worker now ends the stream and exits at once.
TEST(ClientFaultTest, DrainWithOpenHealthWatchesExitsAtOnce) {
  auto cluster = LocalCluster::Start(ClusterOptions{
      .prefill_workers = 0, .decode_workers = 1, .decode_flags = {"--drain_timeout=20s"}});
  ASSERT_NE(cluster, nullptr);
  ChildProcess& worker = *cluster->decode()[0];
  auto channel = client::MakeChannel(worker.grpc_address(), GrpcSecurity());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<grpc::health::v1::HealthCheckResponse>>> watches;
  for (const std::string name : {"", "pdserve.v1.Decode"}) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(name);
    watches.push_back(stub->Watch(contexts.back().get(), request));
    grpc::health::v1::HealthCheckResponse first;
    ASSERT_TRUE(watches.back()->Read(&first));
    EXPECT_EQ(first.status(), grpc::health::v1::HealthCheckResponse::SERVING) << name;
  }
  // Like gRPC's client-side health checking, the clients keep reading.
  std::vector<std::thread> readers;
  std::vector<grpc::health::v1::HealthCheckResponse::ServingStatus> last(watches.size());
  std::vector<grpc::Status> ends(watches.size());
  for (size_t i = 0; i < watches.size(); ++i) {
    readers.emplace_back([&, i] {
      grpc::health::v1::HealthCheckResponse update;
      while (watches[i]->Read(&update)) last[i] = update.status();
      ends[i] = watches[i]->Finish();
    });
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<int> status;
  std::thread stopper([&] { status = worker.Stop(SIGTERM, absl::Seconds(30)); });
  for (auto& t : readers) t.join();
  const absl::Duration watches_ended = absl::Now() - start;
  // Done with the worker: close the connection. (An idle client would otherwise answer the
  // server's shutdown ping only at its next backup poll, gRPC's 5 s, and hold the exit.)
  watches.clear();
  contexts.clear();
  stub.reset();
  channel.reset();
  stopper.join();
  const absl::Duration exited = absl::Now() - start;
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << worker.Log();
  // The drain ended the watches at once instead of holding them to its 20 s deadline.
  EXPECT_LT(watches_ended, absl::Seconds(3)) << "the drain waited for the health watches\n"
                                             << worker.Log();
  EXPECT_LT(exited, absl::Seconds(10)) << worker.Log();
  for (size_t i = 0; i < ends.size(); ++i) {
    EXPECT_EQ(last[i], grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    EXPECT_FALSE(ends[i].ok());
  }
  ExpectProcessHealthy(cluster->router(), "router");
}

// A deadline shorter than the time to the first token: the client gets DEADLINE_EXCEEDED,
// the router counts it as such (it used to count CANCELLED), and nothing is left behind.
TEST(ClientFaultTest, DeadlineShorterThanTtftIsCountedAsDeadlineExceeded) {
  auto cluster = LocalCluster::Start(ClusterOptions{.prefill_workers = 1,
                                                    .decode_workers = 1,
                                                    .router_flags = {"--policy=always_offload"},
                                                    .prefill_flags = {"--layer_delay=100ms"}});
  ASSERT_NE(cluster, nullptr);
  std::vector<int32_t> prompt(300);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i % 90 + 3);
  const auto out = client::CallGenerate(cluster->channel(), client::MakeRequest(prompt, 8),
                                        absl::Milliseconds(150));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << out.status.error_message();
  ExpectClusterAtBaseline(*cluster);
  auto page = HttpGet(cluster->router().metrics_address(), "/metrics");
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(absl::StrContains(
      page->body,
      "pdserve_router_requests_total{code=\"DEADLINE_EXCEEDED\",model_name=\"tiny\"} 1"))
      << page->body;
  EXPECT_FALSE(absl::StrContains(page->body, "pdserve_router_requests_total{code=\"CANCELLED\""));
}

// One client kept 2,000 streams open that it never read, and for as long as it did every
// other client got RESOURCE_EXHAUSTED ("every decode worker ... has 256 requests waiting"):
// admission was first come, first served against global caps. Now a client holds at most its
// share of the cluster's request slots, and the decode worker takes waiting requests client
// by client (preempting a client that runs two more than the one waiting). Scaled down: 32
// running and 64 waiting slots; the greedy client keeps opening long streams all along.
TEST(ClientFaultTest, AGreedyClientDoesNotKeepOthersOut) {
  auto cluster = LocalCluster::Start(
      ClusterOptions{.prefill_workers = 0,
                     .decode_workers = 1,
                     .router_flags = {"--client_id_header=x-client", "--max_waiting_per_worker=64"},
                     .decode_flags = {"--max_num_seqs=32"}});
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(cluster->channel());
  struct Unread {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
  };
  std::vector<std::unique_ptr<Unread>> greedy;
  absl::Notification stop;
  std::atomic<int> opened{0};
  std::thread greedy_client([&] {
    for (int i = 0; i < 2000 && !stop.HasBeenNotified(); ++i) {
      auto call = std::make_unique<Unread>();
      call->context.AddMetadata("x-client", "greedy");
      call->context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
      v1::GenerateRequest request =
          client::MakeRequest({3, 4, 5, static_cast<int32_t>(6 + i % 50)}, 150);
      request.mutable_sampling()->set_ignore_eos(true);
      call->reader = stub->Generate(&call->context, request);  // Never read.
      greedy.push_back(std::move(call));
      opened.fetch_add(1);
      absl::SleepFor(absl::Milliseconds(2));
    }
  });
  // The greedy client fills the worker first, and goes on trying.
  EXPECT_TRUE(cluster->WaitForStatus([&](const v1::ClusterStatus& s) {
    return opened.load() >= 300 && s.workers_size() == 1 && s.workers(0).load().running() >= 32;
  })) << cluster->Status().DebugString();
  // Another client (by address: it sends no x-client) is admitted every time, within a
  // 2 s TTFT objective, while the greedy one keeps at it.
  int admitted = 0;
  for (int i = 0; i < 10; ++i) {
    const auto out = client::CallGenerate(
        cluster->channel(), client::MakeRequest({7, 8, 9, 10 + i}, 4), absl::Seconds(30));
    if (!out.status.ok()) {
      ADD_FAILURE() << "request " << i << ": " << out.status.error_message();
      continue;
    }
    ASSERT_FALSE(out.token_times.empty());
    EXPECT_LT(out.token_times.front() - out.start, absl::Seconds(2)) << "request " << i;
    ++admitted;
  }
  EXPECT_EQ(admitted, 10);
  stop.Notify();
  greedy_client.join();
  auto page = HttpGet(cluster->router().metrics_address(), "/metrics");
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(WaitForMetricAtLeast(cluster->router().metrics_address(),
                                   "pdserve_router_client_share_refusals_total", 1))
      << page->body;
  EXPECT_TRUE(absl::StrContains(page->body,
                                "pdserve_router_client_requests_in_flight{client=\"id:greedy\"}"))
      << page->body;
  for (auto& call : greedy) call->context.TryCancel();
  for (auto& call : greedy) call->reader->Finish().IgnoreError();
  ExpectClusterAtBaseline(*cluster);
}

// The HTTP front names its clients in metadata that only it can make the router trust (a
// per-process secret goes with it): a gRPC client sending the same metadata is still itself.
TEST(ClientFaultTest, AClientCannotPassForAnotherWithTheFrontsMetadata) {
  auto cluster = LocalCluster::Start(
      ClusterOptions{.prefill_workers = 0,
                     .decode_workers = 1,
                     .router_flags = {"--client_max_share=0.001", "--client_min_requests=1"}});
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(cluster->channel());
  grpc::ClientContext held;
  held.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  v1::GenerateRequest long_request = client::MakeRequest({3, 4, 5}, 4000);
  long_request.mutable_sampling()->set_ignore_eos(true);
  auto reader = stub->Generate(&held, long_request);
  v1::GenerateResponse first;
  ASSERT_TRUE(reader->Read(&first));  // Admitted and running: this client's one request.
  grpc::ClientContext posing;
  posing.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  posing.AddMetadata("x-pdserve-front-client", "addr:10.9.9.9");
  posing.AddMetadata("x-pdserve-front-secret", "0123456789abcdef0123456789abcdef");
  auto second = stub->Generate(&posing, client::MakeRequest({3, 4, 6}, 2));
  v1::GenerateResponse ignored;
  while (second->Read(&ignored)) {
  }
  const grpc::Status refused = second->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "client addr:127.0.0.1 has 1 requests"))
      << refused.error_message();
  held.TryCancel();
  reader->Finish().IgnoreError();
  ExpectClusterAtBaseline(*cluster);
}

}  // namespace
}  // namespace pdserve::testing
