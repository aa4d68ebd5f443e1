#include "server/metrics_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "tests/testing/http_client.h"
#include "tests/testing/loopback_client.h"

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

// One idle TCP connection once blinded /metrics for 30 s (one civetweb thread, its default
// request timeout), then 16 did (four threads). The server is event-driven now: with 64 idle
// connections open, half of them holding partial requests, every scrape answers within 1 s.
TEST(MetricsServerTest, SixtyFourIdleConnectionsDoNotDelayAScrape) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto server = MetricsServer::Start("127.0.0.1:0", registry, "unit-test");
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) {
    idle.push_back(testing::ConnectLoopback((*server)->port()));
    if (i % 2 == 0) {
      ASSERT_EQ(write(idle.back(), "GET /met", 8), 8);  // Never finished.
    }
  }
  for (int scrape = 0; scrape < 4; ++scrape) {
    const absl::Time start = absl::Now();
    auto response = testing::HttpGet((*server)->address(), "/metrics", absl::Seconds(10));
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->status, 200);
    EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "scrape " << scrape;
    absl::SleepFor(absl::Milliseconds(300));
  }
  for (int fd : idle) close(fd);
}

// A connection whose request does not arrive whole within 2 s is closed; other paths are 404;
// oversized headers are 431.
TEST(MetricsServerTest, SlowRequestsAreClosedAndOtherRequestsAnswered) {
  auto server =
      MetricsServer::Start("127.0.0.1:0", std::make_shared<prometheus::Registry>(), "unit-test");
  ASSERT_TRUE(server.ok()) << server.status();
  const int slow = testing::ConnectLoopback((*server)->port());
  ASSERT_EQ(write(slow, "GET /metrics HTTP/1.1\r\n", 23), 23);
  const timeval limit{6, 0};
  setsockopt(slow, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  const absl::Time start = absl::Now();
  char byte = 0;
  EXPECT_EQ(recv(slow, &byte, 1, 0), 0) << "the slow request was not closed";
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  close(slow);
  auto other = testing::HttpGet((*server)->address(), "/other");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->status, 404);
  const int big = testing::ConnectLoopback((*server)->port());
  const std::string headers = "GET /metrics HTTP/1.1\r\nX: " + std::string(10000, 'a');
  ASSERT_EQ(write(big, headers.data(), headers.size()), static_cast<ssize_t>(headers.size()));
  setsockopt(big, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  char reply[64] = {};
  ASSERT_GT(recv(big, reply, sizeof(reply) - 1, 0), 0);
  EXPECT_EQ(std::string(reply).substr(0, 12), "HTTP/1.1 431");
  close(big);
}

TEST(MetricsServerTest, BadAddressIsAnError) {
  auto registry = std::make_shared<prometheus::Registry>();
  EXPECT_FALSE(MetricsServer::Start("127.0.0.1", registry, "x").ok());
  EXPECT_FALSE(MetricsServer::Start("256.1.1.1:0", registry, "x").ok());
}

}  // namespace
}  // namespace pdserve
