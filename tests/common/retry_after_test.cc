#include "common/retry_after.h"

#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(RetryAfterTest, TravelsAsAPayloadNotInTheMessage) {
  const absl::Status plain = absl::ResourceExhaustedError("queue full");
  EXPECT_FALSE(RetryAfter(plain).has_value());
  const absl::Status hinted = WithRetryAfter(plain, absl::Milliseconds(250));
  EXPECT_EQ(hinted.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(hinted.message(), "queue full (retry after 250 ms)");
  EXPECT_EQ(RetryAfter(hinted), absl::Milliseconds(250));
  // A message that merely mentions a hint carries none.
  EXPECT_FALSE(RetryAfter(absl::ResourceExhaustedError("retry-after-ms: 5")).has_value());
  EXPECT_EQ(ParseRetryAfterTrailer("40"), absl::Milliseconds(40));
  EXPECT_FALSE(ParseRetryAfterTrailer("-1").has_value());
  EXPECT_FALSE(ParseRetryAfterTrailer("soon").has_value());
}

}  // namespace
}  // namespace pdserve
