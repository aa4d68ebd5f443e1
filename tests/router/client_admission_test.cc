// Per-client admission: each client's share of the cluster's request slots, the refusal past
// it, tickets given back, and how clients are named (bounded, from gRPC's peer strings).
#include "router/client_admission.h"

#include "absl/strings/match.h"
#include "common/retry_after.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/client_identity.h"
#include "router/counts_by_key.h"

namespace pdserve::router {
namespace {

TEST(ClientAdmissionTest, AClientPastItsShareIsRefusedWhileOthersAreAdmitted) {
  ClientAdmission admission(ClientAdmissionConfig{.max_share = 0.5, .min_requests = 2});
  std::vector<ClientAdmission::Ticket> held;
  for (int i = 0; i < 5; ++i) {
    auto t = admission.Admit("addr:greedy", /*cluster_slots=*/10);
    ASSERT_TRUE(t.ok()) << i << ": " << t.status();
    held.push_back(*std::move(t));
  }
  auto refused = admission.Admit("addr:greedy", 10);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "--client_max_share"))
      << refused.status();
  EXPECT_EQ(RetryAfter(refused.status()), absl::Milliseconds(200));
  auto other = admission.Admit("addr:polite", 10);
  EXPECT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(admission.InFlight("addr:greedy"), 5);
  EXPECT_EQ(admission.ActiveClients(), 2);
  // One ends: the greedy client may send one more.
  held.pop_back();
  EXPECT_TRUE(admission.Admit("addr:greedy", 10).ok());
}

TEST(ClientAdmissionTest, EveryClientMayHoldTheMinimumAndShareOneIsNoLimit) {
  ClientAdmission small(ClientAdmissionConfig{.max_share = 0.5, .min_requests = 3});
  EXPECT_EQ(small.Limit(0), 3);  // No worker yet: the minimum.
  EXPECT_EQ(small.Limit(5), 3);
  EXPECT_EQ(small.Limit(9), 4);
  ClientAdmission unlimited(ClientAdmissionConfig{.max_share = 1, .min_requests = 1});
  std::vector<ClientAdmission::Ticket> held;
  for (int i = 0; i < 100; ++i) {
    auto t = unlimited.Admit("addr:one", 4);
    ASSERT_TRUE(t.ok());
    held.push_back(*std::move(t));
  }
}

TEST(ClientAdmissionTest, TicketsGiveTheirPlaceBackOnceAndEntriesGoWithTheLast) {
  ClientAdmission admission(ClientAdmissionConfig{.max_share = 0.5, .min_requests = 1});
  auto a = admission.Admit("addr:a", 2);
  ASSERT_TRUE(a.ok());
  ClientAdmission::Ticket moved = *std::move(a);
  EXPECT_EQ(moved.client(), "addr:a");
  ClientAdmission::Ticket again = std::move(moved);
  EXPECT_EQ(admission.InFlight("addr:a"), 1);
  again.Release();
  again.Release();
  EXPECT_EQ(admission.InFlight("addr:a"), 0);
  EXPECT_EQ(admission.ActiveClients(), 0);
  // A refused admission leaves no entry behind either.
  ClientAdmission tight(ClientAdmissionConfig{.max_share = 0.5, .min_requests = 1});
  auto held = tight.Admit("addr:b", 2);
  ASSERT_TRUE(held.ok());
  EXPECT_FALSE(tight.Admit("addr:b", 2).ok());
  EXPECT_EQ(tight.ActiveClients(), 1);
}

TEST(ClientAdmissionTest, BusiestListsTheTopClientsMostFirst) {
  ClientAdmission admission(ClientAdmissionConfig{.max_share = 1, .min_requests = 1});
  std::vector<ClientAdmission::Ticket> held;
  for (const char* c : {"addr:x", "addr:y", "addr:y", "addr:z", "addr:z", "addr:z"})
    held.push_back(*admission.Admit(c, 10));
  using P = std::pair<std::string, int>;
  EXPECT_THAT(admission.Busiest(2), ::testing::ElementsAre(P{"addr:z", 3}, P{"addr:y", 2}));
  EXPECT_EQ(admission.Busiest(10).size(), 3u);
  EXPECT_TRUE(admission.Busiest(0).empty());
}

TEST(ClientAdmissionTest, ConfigNamesTheFlagAndItsLimit) {
  EXPECT_TRUE(absl::StrContains(ClientAdmissionConfig{.max_share = 0}.Validate().message(),
                                "--client_max_share"));
  EXPECT_TRUE(
      absl::StrContains(ClientAdmissionConfig{.max_share = 1.5}.Validate().message(), "(0, 1]"));
  EXPECT_TRUE(absl::StrContains(ClientAdmissionConfig{.min_requests = 0}.Validate().message(),
                                "--client_min_requests"));
  EXPECT_TRUE(ClientAdmissionConfig{}.Validate().ok());
}

// What both client shares and the registry's per-peer cap count with.
TEST(CountsByKeyTest, EachKeyIsBoundedByItsLimitAndForgottenWithItsLastUnit) {
  CountsByKey counts;
  EXPECT_TRUE(counts.TryAdd("addr:10.0.0.1", 2));
  EXPECT_TRUE(counts.TryAdd("addr:10.0.0.1", 2));
  EXPECT_FALSE(counts.TryAdd("addr:10.0.0.1", 2));
  EXPECT_FALSE(counts.TryAdd("addr:10.0.0.2", 0));  // Refused: nothing counted.
  EXPECT_EQ(counts.keys(), 1);
  EXPECT_EQ(counts.Get("addr:10.0.0.1"), 2);
  counts.Remove("addr:10.0.0.9");  // Unknown: nothing happens.
  counts.Remove("addr:10.0.0.1");
  EXPECT_TRUE(counts.TryAdd("addr:10.0.0.1", 2));
  counts.Remove("addr:10.0.0.1");
  counts.Remove("addr:10.0.0.1");
  EXPECT_EQ(counts.keys(), 0);
  EXPECT_EQ(counts.Get("addr:10.0.0.1"), 0);
}

TEST(ClientIdentityTest, PeersAreNamedByAddressWithoutThePort) {
  EXPECT_EQ(ClientFromPeer("ipv4:10.1.2.3:50051"), "addr:10.1.2.3");
  EXPECT_EQ(ClientFromPeer("ipv4:10.1.2.3:50052"), "addr:10.1.2.3");
  EXPECT_EQ(ClientFromPeer("ipv6:[::1]:443"), "addr:::1");
  EXPECT_EQ(ClientFromPeer("ipv6:[fe80::1%25eth0]:443"), "addr:fe80::1%25eth0");
  EXPECT_EQ(ClientFromPeer("unix:/tmp/sock"), "addr:unix");
  EXPECT_EQ(ClientFromPeer("inproc"), "peer:inproc");
}

TEST(ClientIdentityTest, NamesAreBoundedAndPrintable) {
  EXPECT_EQ(ClientName("id", "team-a"), "id:team-a");
  const std::string long_name = ClientName("id", std::string(5000, 'x'));
  EXPECT_LE(long_name.size(), 3 + 1 + 16 + 1u);
  EXPECT_TRUE(absl::StartsWith(long_name, "id:#")) << long_name;
  EXPECT_EQ(long_name, ClientName("id", std::string(5000, 'x')));  // Stable.
  EXPECT_NE(long_name, ClientName("id", std::string(5001, 'x')));
  EXPECT_TRUE(absl::StartsWith(ClientName("id", "a b"), "id:#"));
  EXPECT_TRUE(absl::StartsWith(ClientName("id", std::string("a\0b", 3)), "id:#"));
  const std::string secret = RandomFrontSecret();
  EXPECT_EQ(secret.size(), 32u);
  EXPECT_NE(secret, RandomFrontSecret());
}

}  // namespace
}  // namespace pdserve::router
