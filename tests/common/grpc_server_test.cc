#include "common/grpc_server.h"

#include <grpcpp/grpcpp.h>

#include "common/health_client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(GrpcServerTest, HealthFollowsReadinessAndDrain) {
  auto server = GrpcServer::Start(GrpcServerConfig{}, {});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_GT((*server)->port(), 0);
  const std::string address = (*server)->address();
  EXPECT_EQ(address.rfind("127.0.0.1:", 0), 0u);

  auto state = CheckHealth(address, absl::Seconds(5));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, HealthState::kNotServing);

  (*server)->SetServing(true);
  state = CheckHealth(address, absl::Seconds(5));
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(*state, HealthState::kServing);
  EXPECT_TRUE(WaitForServing(address, absl::Now() + absl::Seconds(5)).ok());

  (*server)->Drain(absl::Now() + absl::Seconds(1));
  EXPECT_FALSE(CheckHealth(address, absl::Milliseconds(500)).ok());
}

TEST(GrpcServerTest, WaitForServingTimesOutWithTheReason) {
  auto server = GrpcServer::Start(GrpcServerConfig{}, {});
  ASSERT_TRUE(server.ok());
  const absl::Status s = WaitForServing((*server)->address(), absl::Now() + absl::Milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("not SERVING"), absl::string_view::npos);
}

TEST(GrpcServerTest, ConfigValidationNamesTheField) {
  GrpcServerConfig config;
  config.listen_address = "nohost";
  EXPECT_NE(config.Validate().message().find("listen_address"), absl::string_view::npos);
  config.listen_address = "127.0.0.1:0";
  config.max_message_bytes = 10;
  EXPECT_NE(config.Validate().message().find("max_message_bytes"), absl::string_view::npos);
  EXPECT_FALSE(GrpcServer::Start(config, {}).ok());
}

}  // namespace
}  // namespace pdserve
