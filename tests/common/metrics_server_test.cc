#include "common/metrics_server.h"

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

TEST(MetricsServerTest, BadAddressIsAnError) {
  auto registry = std::make_shared<prometheus::Registry>();
  EXPECT_FALSE(MetricsServer::Start("127.0.0.1", registry, "x").ok());
  EXPECT_FALSE(MetricsServer::Start("256.1.1.1:0", registry, "x").ok());
}

}  // namespace
}  // namespace pdserve
