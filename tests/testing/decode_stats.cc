#include "tests/testing/decode_stats.h"

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tools/client/generation_client.h"

namespace pdserve::testing {

v1::DecodeStats DecodeStatsOf(const std::string& address, const GrpcSecurity& security) {
  absl::StatusOr<v1::DecodeStats> stats =
      client::FetchDecodeStats(client::MakeChannel(address, security));
  EXPECT_TRUE(stats.ok()) << address << ": " << stats.status();
  return stats.ok() ? *std::move(stats) : v1::DecodeStats();
}

bool WaitForDecodeBaseline(const std::string& address, absl::Duration timeout,
                           const GrpcSecurity& security) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (client::AtBaseline(DecodeStatsOf(address, security))) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

}  // namespace pdserve::testing
