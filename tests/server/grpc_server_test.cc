#include "server/grpc_server.h"

#include <grpcpp/grpcpp.h>

#include <thread>

#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "pdserve/v1/registry.grpc.pb.h"
#include "server/health_client.h"

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

// The probe names Kubernetes asks: live answers SERVING from the start and through a drain
// (a restart would cut every stream); ready needs serving and the role's condition, and goes
// NOT_SERVING when draining.
TEST(GrpcServerTest, LivenessAndReadinessProbes) {
  auto server = GrpcServer::Start(GrpcServerConfig{}, {});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  auto probe = [&](const std::string& service) {
    auto state = CheckHealth(address, absl::Seconds(5), GrpcSecurity(), service);
    return state.ok() ? *state : HealthState::kUnknown;
  };
  EXPECT_EQ(probe("pdserve.live"), HealthState::kServing);
  EXPECT_EQ(probe("pdserve.ready"), HealthState::kNotServing);
  (*server)->SetServing(true);
  EXPECT_EQ(probe("pdserve.ready"), HealthState::kServing);
  (*server)->SetReady(false);  // E.g. a worker no router knows.
  EXPECT_EQ(probe("pdserve.ready"), HealthState::kNotServing);
  EXPECT_EQ(probe(""), HealthState::kServing);  // The process itself still serves peers.
  EXPECT_EQ(probe("pdserve.live"), HealthState::kServing);
  (*server)->SetReady(true);
  EXPECT_EQ(probe("pdserve.ready"), HealthState::kServing);
  (*server)->health().Shutdown();  // What a drain does first.
  EXPECT_EQ(probe("pdserve.ready"), HealthState::kNotServing);
  EXPECT_EQ(probe(""), HealthState::kNotServing);
  EXPECT_EQ(probe("pdserve.live"), HealthState::kServing);
  (*server)->SetReady(true);  // Ignored once shut down.
  EXPECT_EQ(probe("pdserve.ready"), HealthState::kNotServing);
  (*server)->Drain(absl::Now());
}

// Health checks by service name (gRPC's client-side health checking asks by name) know every
// hosted service; an unknown name says which are known.
TEST(GrpcServerTest, HealthKnowsEveryHostedServiceByName) {
  v1::Registry::CallbackService registry;  // Unimplemented methods: only its name matters.
  auto server =
      GrpcServer::Start(GrpcServerConfig{}, {{&registry, v1::Registry::service_full_name()}});
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetServing(true);
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  for (const std::string name : {"", "pdserve.v1.Registry"}) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(name);
    grpc::health::v1::HealthCheckResponse response;
    ASSERT_TRUE(stub->Check(&ctx, request, &response).ok()) << name;
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING) << name;
  }
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("no.such.Service");
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = stub->Check(&ctx, request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("pdserve.v1.Registry"), std::string::npos) << s.error_message();
}

// An open Watch stream (every client with gRPC's client-side health checking has one) once
// held a draining server for its whole drain deadline. Drain now tells it NOT_SERVING and
// ends it at once.
TEST(GrpcServerTest, DrainEndsOpenWatchStreamsAtOnce) {
  auto server = GrpcServer::Start(GrpcServerConfig{}, {});
  ASSERT_TRUE(server.ok());
  (*server)->SetServing(true);
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  auto reader = stub->Watch(&ctx, grpc::health::v1::HealthCheckRequest());
  grpc::health::v1::HealthCheckResponse update;
  ASSERT_TRUE(reader->Read(&update));
  EXPECT_EQ(update.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  const absl::Time start = absl::Now();
  std::thread drain([&] { (*server)->Drain(absl::Now() + absl::Seconds(20)); });
  std::vector<grpc::health::v1::HealthCheckResponse::ServingStatus> seen;
  while (reader->Read(&update)) seen.push_back(update.status());
  const grpc::Status end = reader->Finish();
  drain.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(end.error_code(), grpc::StatusCode::UNAVAILABLE) << end.error_message();
}

TEST(GrpcServerTest, WaitForServingTimesOutWithTheReason) {
  auto server = GrpcServer::Start(GrpcServerConfig{}, {});
  ASSERT_TRUE(server.ok());
  // Long enough for the first health check to connect on a loaded machine (a shorter wait
  // could end with the connection's error instead of the reason).
  const absl::Status s = WaitForServing((*server)->address(), absl::Now() + absl::Seconds(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("not SERVING"), absl::string_view::npos);
}

// A listener owns its port: a second server (another process, in production) cannot bind it
// and take a share of new connections, as it could with gRPC's default SO_REUSEPORT.
TEST(GrpcServerTest, ASecondServerCannotBindAnOwnedPort) {
  auto first = GrpcServer::Start(GrpcServerConfig{}, {});
  ASSERT_TRUE(first.ok()) << first.status();
  GrpcServerConfig same;
  same.listen_address = (*first)->address();
  auto second = GrpcServer::Start(same, {});
  ASSERT_FALSE(second.ok()) << "a second server bound " << same.listen_address;
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(same.listen_address), absl::string_view::npos)
      << second.status();
  EXPECT_NE(second.status().message().find("is in use"), absl::string_view::npos)
      << second.status();
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
