// A worker id proved by the client certificate: accepted only when the certificate's URI SANs
// hold the configured prefix followed by the id, exactly; the refusal names the id, the URI it
// needs and (bounded) what the certificate names.
#include "router/worker_certificate.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace pdserve::router {
namespace {

constexpr char kPrefix[] = "spiffe://pdserve/worker/";

TEST(WorkerCertificateTest, OnlyTheUriNamingTheIdProvesIt) {
  const std::vector<std::string> uris = {"spiffe://other/thing",
                                         "spiffe://pdserve/worker/decode-0"};
  EXPECT_TRUE(CheckWorkerIdCertificate("decode-0", kPrefix, uris).ok());
  // Another worker's id, a prefix of the id, the id with more after it: all refused.
  for (const char* id : {"decode-1", "decode-", "decode-00", "prefill-0"}) {
    const absl::Status s = CheckWorkerIdCertificate(id, kPrefix, uris);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << id;
    EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("'", id, "'"))) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat(kPrefix, id))) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "--worker_id_uri_prefix")) << s;
  }
  // The URI under another prefix does not count.
  EXPECT_FALSE(CheckWorkerIdCertificate("decode-0", "spiffe://pdserve/decode/", uris).ok());
}

TEST(WorkerCertificateTest, ACertificateWithoutUrisIsRefusedAndALongOneIsBoundedInTheMessage) {
  const absl::Status none = CheckWorkerIdCertificate("decode-0", kPrefix, {});
  EXPECT_EQ(none.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(none.message(), "no URI")) << none;
  const absl::Status long_uri =
      CheckWorkerIdCertificate("decode-0", kPrefix, {std::string(5000, 'u')});
  EXPECT_EQ(long_uri.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_LT(long_uri.message().size(), 400u) << "the peer's URI is not bounded in the message";
}

}  // namespace
}  // namespace pdserve::router
