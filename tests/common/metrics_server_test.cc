#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "tests/testing/http_client.h"

namespace pdserve {
namespace {

TEST(MetricsServerTest, ScrapeFindsRegisteredMetric) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& family = prometheus::BuildCounter()
                     .Name("pdserve_test_widgets_total")
                     .Help("Widgets made by the test.")
                     .Register(*registry);
  family.Add({{"kind", "blue"}}).Increment(3);
  auto server = MetricsServer::Start("127.0.0.1:0", registry, "unit-test");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);

  auto response = testing::HttpGet((*server)->address(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_NE(response->body.find("# TYPE pdserve_test_widgets_total counter"), std::string::npos);
  EXPECT_NE(response->body.find("pdserve_test_widgets_total{kind=\"blue\"} 3"), std::string::npos)
      << response->body;
  EXPECT_NE(response->body.find("pdserve_build_info{component=\"unit-test\""), std::string::npos);
}

// A squatter that asks for port sharing (SO_REUSEPORT, as gRPC does by default) cannot bind
// the /metrics port: the listener did not ask for sharing, so the kernel refuses.
TEST(MetricsServerTest, ASquatterCannotBindTheMetricsPort) {
  auto server =
      MetricsServer::Start("127.0.0.1:0", std::make_shared<prometheus::Registry>(), "unit-test");
  ASSERT_TRUE(server.ok()) << server.status();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>((*server)->port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  const int error = errno;
  close(fd);
  EXPECT_EQ(bound, -1) << "a second socket bound the /metrics port";
  EXPECT_EQ(error, EADDRINUSE);
}

// One idle TCP connection used to blind /metrics for 30 s (one serving thread, civetweb's
// default request timeout). Now scrapes go through beside several silent connections.
TEST(MetricsServerTest, IdleConnectionsDoNotBlindTheScrape) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto server = MetricsServer::Start("127.0.0.1:0", registry, "unit-test");
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<int> idle;
  for (int i = 0; i < 6; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>((*server)->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    if (i == 0) {
      ASSERT_EQ(write(fd, "GET /met", 8), 8);  // A request that never ends.
    }
    idle.push_back(fd);
  }
  const absl::Time start = absl::Now();
  auto response = testing::HttpGet((*server)->address(), "/metrics", absl::Seconds(10));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (int fd : idle) close(fd);
}

TEST(MetricsServerTest, BadAddressIsAnError) {
  auto registry = std::make_shared<prometheus::Registry>();
  EXPECT_FALSE(MetricsServer::Start("127.0.0.1", registry, "x").ok());
  EXPECT_FALSE(MetricsServer::Start("256.1.1.1:0", registry, "x").ok());
}

}  // namespace
}  // namespace pdserve
