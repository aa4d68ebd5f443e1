// The registry client against an in-process fake Registry: it registers first, reports load
// about every interval with a full prefix resync on the first report, and after the router
// goes away and comes back on the same address it registers again.
#include "server/registry_client.h"

#include <grpcpp/grpcpp.h>

#include <set>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pdserve/v1/registry.grpc.pb.h"
#include "server/grpc_server.h"

namespace pdserve {
namespace {

class FakeRegistry final : public v1::Registry::Service {
 public:
  grpc::Status Connect(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::RouterMessage, v1::WorkerMessage>* stream) override {
    v1::WorkerMessage message;
    while (stream->Read(&message)) {
      absl::MutexLock lock(&mu_);
      if (message.has_registration()) {
        registrations_.push_back(message.registration());
        v1::RouterMessage ack;
        ack.mutable_ack()->set_accepted(!refuse_);
        ack.mutable_ack()->set_message(refuse_ ? "refused by test" : "welcome");
        ack.mutable_ack()->set_heartbeat_interval_ms(heartbeat_ms_);
        stream->Write(ack);
      } else if (message.has_load()) {
        loads_.push_back(message.load());
      } else if (message.has_prefix_cache()) {
        events_.push_back(message.prefix_cache());
      }
    }
    return grpc::Status::OK;
  }
  absl::Mutex mu_;
  bool refuse_ = false;
  uint32_t heartbeat_ms_ = 0;  // Sent in the ack: 0, every report.
  std::vector<v1::WorkerRegistration> registrations_;
  std::vector<v1::LoadReport> loads_;
  std::vector<v1::PrefixCacheEvents> events_;
};

bool WaitFor(const std::function<bool()>& cond, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return cond();
}

TEST(RegistryClientTest, RegistersReportsAndReconnects) {
  auto fake = std::make_unique<FakeRegistry>();
  auto server =
      GrpcServer::Start(GrpcServerConfig{}, {{fake.get(), v1::Registry::service_full_name()}});
  ASSERT_TRUE(server.ok());
  const std::string address = (*server)->address();

  WorkerRegistration reg;
  reg.worker_id = "decode-7";
  reg.role = WorkerRole::kDecode;
  std::atomic<int> reports{0};
  RegistryClient client(RegistryClientConfig{.router_address = address,
                                             .report_interval = absl::Milliseconds(20),
                                             .min_backoff = absl::Milliseconds(20),
                                             .max_backoff = absl::Milliseconds(200)},
                        reg,
                        [&](bool reconnected, WorkerReport* report, PrefixCacheChanges* prefix) {
                          report->load.running = 3;
                          report->load.total_blocks = 100;
                          if (reconnected) {
                            prefix->reset = true;
                            prefix->stored.push_back(42);
                          }
                          ++reports;
                        });
  client.Start();
  ASSERT_TRUE(WaitFor([&] { return client.connected() && reports.load() >= 5; }, absl::Seconds(5)));
  {
    absl::MutexLock lock(&fake->mu_);
    ASSERT_EQ(fake->registrations_.size(), 1u);
    EXPECT_EQ(fake->registrations_[0].worker_id(), "decode-7");
    ASSERT_FALSE(fake->loads_.empty());
    EXPECT_EQ(fake->loads_.back().running(), 3u);
    EXPECT_GT(fake->loads_.back().sequence(), fake->loads_.front().sequence());
    ASSERT_FALSE(fake->events_.empty());
    EXPECT_TRUE(fake->events_[0].reset());
    EXPECT_EQ(fake->events_[0].stored(0), 42u);
  }
  // The router goes away; a new one comes up on the same address.
  (*server)->Drain(absl::Now());
  server->reset();
  ASSERT_TRUE(WaitFor([&] { return !client.connected(); }, absl::Seconds(5)));
  auto fake2 = std::make_unique<FakeRegistry>();
  GrpcServerConfig same;
  same.listen_address = address;
  auto server2 = GrpcServer::Start(same, {{fake2.get(), v1::Registry::service_full_name()}});
  ASSERT_TRUE(server2.ok()) << server2.status();
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::MutexLock lock(&fake2->mu_);
        return !fake2->registrations_.empty() && !fake2->events_.empty();
      },
      absl::Seconds(10)));
  {
    absl::MutexLock lock(&fake2->mu_);
    EXPECT_TRUE(fake2->events_[0].reset());  // Full resync after reconnecting.
  }
  EXPECT_EQ(client.registrations(), 2);
  client.Stop();
  (*server2)->Drain(absl::Now());
}

// A router that allows heartbeats gets an unchanged load only every heartbeat (an idle fleet
// costs it a fraction of its reports), and every report again once the load changes.
TEST(RegistryClientTest, AnUnchangedLoadIsSentOnlyEveryHeartbeat) {
  auto fake = std::make_unique<FakeRegistry>();
  fake->heartbeat_ms_ = 300;
  auto server =
      GrpcServer::Start(GrpcServerConfig{}, {{fake.get(), v1::Registry::service_full_name()}});
  ASSERT_TRUE(server.ok());
  WorkerRegistration reg;
  reg.worker_id = "decode-idle";
  std::atomic<bool> changing{false};
  std::atomic<int> taken{0};
  RegistryClient client(RegistryClientConfig{.router_address = (*server)->address(),
                                             .report_interval = absl::Milliseconds(10)},
                        reg, [&](bool, WorkerReport* report, PrefixCacheChanges*) {
                          const int n = taken.fetch_add(1);
                          report->load.total_blocks = 100;
                          report->load.running = changing.load() ? n : 0;
                        });
  auto received = [&] {
    absl::MutexLock lock(&fake->mu_);
    return fake->loads_.size();
  };
  client.Start();
  ASSERT_TRUE(WaitFor([&] { return received() >= 1; }, absl::Seconds(5)));
  // About 100 reports taken in a second, one sent every 300 ms.
  const int taken_before = taken.load();
  absl::SleepFor(absl::Seconds(1));
  const size_t idle = received();
  ASSERT_GE(taken.load() - taken_before, 20) << "the reporter did not run";
  EXPECT_GE(idle, 2u);
  EXPECT_LE(idle, 7u);
  // Changing load: every report goes.
  changing.store(true);
  const int taken_at_change = taken.load();
  ASSERT_TRUE(WaitFor([&] { return taken.load() >= taken_at_change + 30; }, absl::Seconds(10)));
  client.Stop();
  EXPECT_GE(received() - idle, 25u);
  (*server)->Drain(absl::Now());
}

// Two fake routers on their own servers, and the comma list that names both.
struct TwoRouters {
  TwoRouters() : fake1(std::make_unique<FakeRegistry>()), fake2(std::make_unique<FakeRegistry>()) {
    auto s1 =
        GrpcServer::Start(GrpcServerConfig{}, {{fake1.get(), v1::Registry::service_full_name()}});
    auto s2 =
        GrpcServer::Start(GrpcServerConfig{}, {{fake2.get(), v1::Registry::service_full_name()}});
    EXPECT_TRUE(s1.ok() && s2.ok());
    if (s1.ok()) server1 = *std::move(s1);
    if (s2.ok()) server2 = *std::move(s2);
  }
  bool ok() const { return server1 != nullptr && server2 != nullptr; }
  std::string addresses() const { return server1->address() + "," + server2->address(); }
  RegistryClientConfig Config(std::atomic<int>* latest_routers) const {
    return RegistryClientConfig{
        .router_address = addresses(),
        .report_interval = absl::Milliseconds(10),
        .min_backoff = absl::Milliseconds(20),
        .max_backoff = absl::Milliseconds(200),
        .on_registered_routers = [latest_routers](int n) { latest_routers->store(n); }};
  }
  // Stops a router (its server drains and goes).
  static void StopRouter(std::unique_ptr<GrpcServer>& server) {
    if (server == nullptr) return;
    server->Drain(absl::Now());
    server.reset();
  }
  ~TwoRouters() {
    StopRouter(server1);
    StopRouter(server2);
  }
  std::unique_ptr<FakeRegistry> fake1, fake2;
  std::unique_ptr<GrpcServer> server1, server2;
};

// With two routers (a comma list here; a headless Service's name in Kubernetes) each gets the
// registration, every load report and every prefix event: the events are consumed when taken,
// so a report handed to one router only would leave the other's prefix view wrong.
TEST(RegistryClientTest, EveryRouterGetsEveryReportAndEvent) {
  TwoRouters routers;
  ASSERT_TRUE(routers.ok());
  WorkerRegistration reg;
  reg.worker_id = "decode-2r";
  std::atomic<uint64_t> next_hash{1};
  std::atomic<int> latest_routers{-1};
  RegistryClient client(routers.Config(&latest_routers), reg,
                        [&](bool reconnected, WorkerReport* report, PrefixCacheChanges* prefix) {
                          report->load.running = 1;
                          // A reset lists everything stored so far; otherwise one new hash per
                          // report.
                          const uint64_t h = next_hash.fetch_add(1);
                          if (reconnected) {
                            prefix->reset = true;
                            for (uint64_t i = 1; i <= h; ++i) prefix->stored.push_back(i);
                          } else {
                            prefix->stored.push_back(h);
                          }
                        });
  client.Start();
  ASSERT_TRUE(WaitFor([&] { return client.registered_routers() == 2 && next_hash.load() > 30; },
                      absl::Seconds(10)));
  EXPECT_EQ(latest_routers.load(), 2);
  client.Stop();
  // Each router's view, rebuilt from its events, holds every hash up to the last it saw.
  for (FakeRegistry* fake : {routers.fake1.get(), routers.fake2.get()}) {
    absl::MutexLock lock(&fake->mu_);
    ASSERT_EQ(fake->registrations_.size(), 1u);
    ASSERT_FALSE(fake->events_.empty());
    EXPECT_TRUE(fake->events_[0].reset()) << "prefix events before a resync";
    std::set<uint64_t> view;
    for (const auto& e : fake->events_) {
      if (e.reset()) view.clear();
      view.insert(e.stored().begin(), e.stored().end());
    }
    ASSERT_FALSE(view.empty());
    EXPECT_EQ(view.size(), *view.rbegin()) << "a hash went to the other router only";
    EXPECT_GT(fake->loads_.size(), 10u);
  }
}

// One router of two goes away: the worker stays registered (and ready) with the other.
TEST(RegistryClientTest, LosingOneRouterOfTwoKeepsTheOther) {
  TwoRouters routers;
  ASSERT_TRUE(routers.ok());
  std::atomic<int> latest_routers{-1};
  RegistryClient client(routers.Config(&latest_routers), WorkerRegistration(),
                        [](bool, WorkerReport*, PrefixCacheChanges*) {});
  client.Start();
  ASSERT_TRUE(WaitFor([&] { return latest_routers.load() == 2; }, absl::Seconds(10)));
  TwoRouters::StopRouter(routers.server1);
  ASSERT_TRUE(WaitFor([&] { return latest_routers.load() == 1; }, absl::Seconds(10)));
  EXPECT_TRUE(client.connected());
  TwoRouters::StopRouter(routers.server2);
  ASSERT_TRUE(WaitFor([&] { return latest_routers.load() == 0; }, absl::Seconds(10)));
  EXPECT_FALSE(client.connected());
  client.Stop();
}

TEST(ResolveRouterAddressesTest, LiteralsListsAndNames) {
  using ::testing::ElementsAre;
  EXPECT_THAT(*ResolveRouterAddresses("127.0.0.1:5"), ElementsAre("127.0.0.1:5"));
  EXPECT_THAT(*ResolveRouterAddresses("[::1]:5"), ElementsAre("[::1]:5"));
  // Sorted, without repeats, spaces ignored.
  EXPECT_THAT(*ResolveRouterAddresses("127.0.0.2:6, 127.0.0.1:5,127.0.0.2:6"),
              ElementsAre("127.0.0.1:5", "127.0.0.2:6"));
  // A name with IPv4 and IPv6 addresses counts once (its IPv4 ones).
  auto local = ResolveRouterAddresses("localhost:7");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_THAT(*local, ::testing::Contains("127.0.0.1:7"));
  EXPECT_THAT(*local, ::testing::Not(::testing::Contains("[::1]:7")));
  EXPECT_EQ(ResolveRouterAddresses("no-such-host.invalid:7").status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(ResolveRouterAddresses("127.0.0.1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveRouterAddresses(" , ").status().code(), absl::StatusCode::kInvalidArgument);
}

// A worker pointed at a listener without the registry (the router's public port when the
// registry has its own) once failed silently; now it says why, with a hint.
TEST(RegistryClientTest, AFailedRegistrationSaysWhy) {
  auto server = GrpcServer::Start(GrpcServerConfig{}, {});  // No Registry service here.
  ASSERT_TRUE(server.ok());
  RegistryClient client(RegistryClientConfig{.router_address = (*server)->address(),
                                             .min_backoff = absl::Milliseconds(20),
                                             .max_backoff = absl::Milliseconds(100)},
                        WorkerRegistration(), [](bool, auto*, auto*) {});
  client.Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (client.last_error().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  client.Stop();
  const std::string error = client.last_error();
  EXPECT_NE(error.find("cannot register with router " + (*server)->address() + ": UNIMPLEMENTED"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("--registry_listen"), std::string::npos) << error;
  EXPECT_FALSE(client.connected());
}

TEST(RegistryClientTest, WithoutARouterItDoesNothing) {
  RegistryClient client(RegistryClientConfig{}, WorkerRegistration(),
                        [](bool, auto*, auto*) { FAIL(); });
  client.Start();
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(client.connected());
  client.Stop();
}

}  // namespace
}  // namespace pdserve
