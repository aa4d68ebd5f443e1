// Fault suite (label "fault"): clients that misbehave. One that stops reading once held its
// KV blocks and batch slot for as long as it stayed connected; now it is ended after
// --max_client_stall and everything it held goes back.
#include "absl/strings/match.h"
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
    ended = page.ok() && absl::StrContains(page->body, "pdserve_stalled_clients_total{model_name=\"tiny\"} 1");
    if (!ended) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(ended) << LocalCluster::DecodeStats(worker).DebugString();
  EXPECT_TRUE(LocalCluster::WaitForBaseline(worker, absl::Seconds(5))) << LocalCluster::DecodeStats(worker).DebugString();
  context.TryCancel();
  reader->Finish().IgnoreError();
  ExpectClusterAtBaseline(*cluster);
}

}  // namespace
}  // namespace pdserve::testing
