// Fault suite (label "fault"): hostile input at the router's public port. Bytes that are not
// a request, methods that do not exist, request ids that would forge log lines, and prompts
// too big for every worker each get a clear, non-retryable error naming what was wrong, and
// the cluster ends at baseline.
#include <grpcpp/generic/generic_stub.h>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/integration/fault_check.h"
#include "tools/client/generation_client.h"

namespace pdserve::testing {
namespace {

// One raw unary call of `bytes` to `method`.
grpc::Status RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& bytes) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

TEST(InputFaultTest, HostileRequestsGetClearErrorsAndLoseNothing) {
  auto cluster = LocalCluster::Start(ClusterOptions{.decode_flags = {"--num_blocks=64"}});
  ASSERT_NE(cluster, nullptr);

  // Bytes that do not parse as a GenerateRequest (gRPC alone answers UNIMPLEMENTED, "").
  grpc::Status s = RawCall(cluster->channel(), "/pdserve.v1.Generation/Generate",
                           std::string("\xff\xff\xff\x0a\x05zz", 7));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "pdserve.v1.GenerateRequest"))
      << s.error_message();

  // A method nobody serves is named, with the services that are.
  s = RawCall(cluster->channel(), "/pdserve.v1.Generation/Nope", "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "/pdserve.v1.Generation/Nope"))
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "pdserve.v1.Generation,")) << s.error_message();

  // Request ids that would forge log lines or drive a terminal.
  for (const std::string id :
       {"abc\nF1123 00:00:00 forged.cc:1] pwned", "esc\x1b[31mred", "tab\there"}) {
    v1::GenerateRequest r = client::MakeRequest({1, 2, 3}, 2);
    r.set_request_id(id);
    const auto out = client::CallGenerate(cluster->channel(), r, absl::Seconds(10));
    EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << out.status.error_message();
    EXPECT_TRUE(absl::StrContains(out.status.error_message(), "request_id"))
        << out.status.error_message();
  }
  EXPECT_FALSE(absl::StrContains(cluster->router().Log(), "pwned"));

  // A prompt that fits the model's context but no worker's pool (64 blocks of 16): a retry
  // cannot help, so the error is not the retryable UNAVAILABLE.
  std::vector<int32_t> big(2000, 5);
  const auto out =
      client::CallGenerate(cluster->channel(), client::MakeRequest(big, 4), absl::Seconds(10));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << out.status.error_message();
  EXPECT_TRUE(absl::StrContains(out.status.error_message(), "prompt: 2000 tokens"))
      << out.status.error_message();

  // Still serving.
  const auto ok = client::CallGenerate(cluster->channel(), client::MakeRequest({1, 2, 3}, 3),
                                       absl::Seconds(30));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  ExpectClusterAtBaseline(*cluster);
}

}  // namespace
}  // namespace pdserve::testing
