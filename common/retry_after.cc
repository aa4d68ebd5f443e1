#include "common/retry_after.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

constexpr char kPayloadUrl[] = "type.pdserve.dev/retry-after-ms";

}  // namespace

absl::Status WithRetryAfter(absl::Status status, absl::Duration retry_after) {
  const int64_t ms = absl::ToInt64Milliseconds(retry_after);
  absl::Status out(status.code(), absl::StrCat(status.message(), " (retry after ", ms, " ms)"));
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  out.SetPayload(kPayloadUrl, absl::Cord(absl::StrCat(ms)));
  return out;
}

std::optional<absl::Duration> RetryAfter(const absl::Status& status) {
  const auto payload = status.GetPayload(kPayloadUrl);
  if (!payload.has_value()) return std::nullopt;
  return ParseRetryAfterTrailer(std::string(*payload));
}

std::optional<absl::Duration> ParseRetryAfterTrailer(const std::string& value) {
  int64_t ms;
  if (!absl::SimpleAtoi(value, &ms) || ms < 0) return std::nullopt;
  return absl::Milliseconds(ms);
}

}  // namespace pdserve
