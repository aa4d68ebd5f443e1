#include "common/net_address.h"

#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(NetAddressTest, ParsesHostPortForms) {
  auto v4 = ParseHostPort("127.0.0.1:8080", "listen");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 8080);
  auto v6 = ParseHostPort("[::1]:0", "listen");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->ToString(), "[::1]:0");
  auto any = ParseHostPort(":9000", "listen");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->host, "");
}

TEST(NetAddressTest, ErrorsNameTheFieldAndTheLimit) {
  auto no_port = ParseHostPort("localhost", "--router");
  EXPECT_EQ(no_port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_port.status().message().find("--router"), absl::string_view::npos);
  auto big = ParseHostPort("h:70000", "--listen");
  EXPECT_NE(big.status().message().find("[0, 65535]"), absl::string_view::npos);
  EXPECT_FALSE(ParseHostPort("::1:80", "x").ok());
  EXPECT_FALSE(ParseHostPort("[::1]80", "x").ok());
}

TEST(NetAddressTest, WithPortMakesWildcardsDialable) {
  EXPECT_EQ(WithPort(HostPort{"0.0.0.0", 0}, 1234), "127.0.0.1:1234");
  EXPECT_EQ(WithPort(HostPort{"10.0.0.2", 0}, 1234), "10.0.0.2:1234");
}

TEST(NetAddressTest, LoopbackHostsAreOnlyThoseThatNameThisMachine) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "::1", "localhost"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"", "0.0.0.0", "::", "10.0.0.2", "128.0.0.1", "example.com"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

}  // namespace
}  // namespace pdserve
