// A cluster across hosts, on one machine: the router, a prefill worker and a decode worker
// each in their own network namespace, joined by a bridge, talking mutual TLS over gRPC and
// UCX over TCP on their own interfaces. An offloaded request crosses all three; a partition
// of the prefill host sends prompts to local prefill, and once it heals the prefill worker
// re-registers and takes offloads again; lossy, slow and one-way-cut links (no netem: a BPF
// loss program and tbf) slow or fail transfers but never corrupt them. Needs CAP_NET_ADMIN:
// skipped without it.
#include <iostream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/net_address.h"
#include "gtest/gtest.h"
#include "pdserve/v1/registry.grpc.pb.h"
#include "server/child_process.h"
#include "server/grpc_channel.h"
#include "tests/router/cluster_fixture.h"
#include "tests/testing/greedy_reference.h"
#include "tests/testing/http_client.h"
#include "tests/testing/poll.h"
#include "tests/testing/test_models.h"
#include "tools/client/generation_client.h"
#include "tools/testbed/netns_topology.h"
#include "tools/testbed/throwaway_pki.h"

namespace pdserve {
namespace {

using testbed::NetnsTopology;
using testbed::ThrowawayPki;
using testbed::TlsFlags;

// Starts `binary` with `flags` and its TLS flags on namespace `host`, and waits until healthy.
std::unique_ptr<ChildProcess> StartOnHost(const NetnsTopology& net, size_t host,
                                          const std::string& binary, std::vector<std::string> flags,
                                          const std::vector<std::string>& tls,
                                          const GrpcSecurity& client) {
  std::vector<std::string> args = net.ExecPrefix(host);
  args.push_back(BinaryPath(binary));
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), tls.begin(), tls.end());
  auto child = ChildProcess::Start(
      ChildOptions{.binary = "/usr/sbin/ip", .args = args, .name = binary, .security = client});
  EXPECT_TRUE(child.ok()) << binary << ": " << child.status();
  if (!child.ok()) return nullptr;
  EXPECT_TRUE((*child)->WaitHealthy(absl::Seconds(30)).ok()) << (*child)->Log();
  return *std::move(child);
}

// Workers registered with the router whose registry is at `address`; -1 if unreachable.
int RegisteredWorkers(const std::string& address, const GrpcSecurity& client) {
  auto stub = v1::Registry::NewStub(MakeChannel(address, client));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::ClusterStatus status;
  if (!stub->GetClusterStatus(&context, v1::ClusterStatusRequest(), &status).ok()) return -1;
  return status.workers_size();
}

constexpr size_t kRouter = 0;
constexpr size_t kPrefill = 1;
constexpr size_t kDecode = 2;

class NetnsClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto topology = NetnsTopology::Create({"router", "prefill", "decode"});
    if (!topology.ok()) GTEST_SKIP() << "no network namespaces here: " << topology.status();
    net_ = *std::move(topology);
    auto pki = ThrowawayPki::Create("pdserve-netns-ca");
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *std::move(pki);
    const char* roles[] = {"router", "prefill", "decode"};
    for (size_t i = 0; i < 3; ++i) {
      auto cert = pki_->Issue(roles[i], roles[i], {"IP:" + net_->host(i).address});
      ASSERT_TRUE(cert.ok()) << cert.status();
      tls_.push_back(TlsFlags(pki_->Config(*cert, /*require_client_cert=*/true)));
    }
    auto client_cert = pki_->Issue("client", "client", {});
    ASSERT_TRUE(client_cert.ok()) << client_cert.status();
    auto client = GrpcSecurity::FromConfig(pki_->Config(*client_cert));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *client;

    const std::string model = "--model=" + testing::TestModelDir("tiny");
    router_ =
        Start(kRouter, "pdserve-router",
              {model, "--listen=" + Address(kRouter, 0), "--registry_listen=" + Address(kRouter, 0),
               "--metrics_listen=" + Address(kRouter, 0), "--policy=always_offload",
               "--worker_timeout=1s", "--drain_timeout=5s"});
    ASSERT_NE(router_, nullptr);
    const std::string registry = "--router=" + router_->internal_grpc_address();
    for (const size_t host : {kPrefill, kDecode}) {
      auto& slot = host == kPrefill ? prefill_ : decode_;
      slot = Start(host, host == kPrefill ? "pdserve-prefill" : "pdserve-decode",
                   {model, "--threads=1", "--kv_cache_bytes=67108864", "--drain_timeout=5s",
                    "--listen=" + Address(host, 0), "--metrics_listen=" + Address(host, 0),
                    "--ucx_transports=tcp", "--ucx_net_devices=" + net_->host(host).interface,
                    registry, host == kPrefill ? "--worker_id=prefill-0" : "--worker_id=decode-0",
                    // Prefill: a pause after each layer, so that a transfer lasts long
                    // enough to be cut (tiny model: 4 layers).
                    host == kPrefill ? "--layer_delay=150ms" : "--max_num_batched_tokens=64"});
      ASSERT_NE(slot, nullptr);
    }
    ASSERT_TRUE(WaitForWorkers(2));
  }

  std::string Address(size_t host, int port) const {
    return absl::StrCat(net_->host(host).address, ":", port);
  }

  std::unique_ptr<ChildProcess> Start(size_t host, const std::string& binary,
                                      std::vector<std::string> flags) {
    return StartOnHost(*net_, host, binary, std::move(flags), tls_[host], client_);
  }

  int RegisteredWorkers() {
    return pdserve::RegisteredWorkers(router_->internal_grpc_address(), client_);
  }

  bool WaitForWorkers(int n, absl::Duration timeout = absl::Seconds(30)) {
    return testing::PollUntil([&] { return RegisteredWorkers() == n; }, timeout,
                              absl::Milliseconds(100));
  }

  client::GenerationOutcome Generate(const std::vector<int32_t>& prompt = {3, 1, 4, 1, 5, 9, 2, 6,
                                                                           5, 3},
                                     int max_tokens = 4) {
    return client::CallGenerate(MakeChannel(router_->grpc_address(), client_),
                                client::MakeRequest(prompt, max_tokens), absl::Seconds(60));
  }

  // Polls (short prompts, each new) until one is offloaded and completes without falling
  // back: the prefill worker is registered, reported and reachable.
  bool WaitUntilOffloading() {
    int n = 0;
    return testing::PollUntil(
        [&] {
          const auto out = Generate({7, 11, static_cast<int32_t>(13 + n++ % 900)}, 2);
          return out.status.ok() && out.result.placement().mode() == v1::PLACEMENT_MODE_OFFLOAD &&
                 !out.result.placement().fell_back_to_local();
        },
        absl::Seconds(30), absl::Milliseconds(200));
  }

  // Every process up, the decode worker's blocks back at baseline.
  void ExpectRecovered() {
    EXPECT_TRUE(router_->running()) << router_->Log();
    EXPECT_TRUE(prefill_->running()) << prefill_->Log();
    EXPECT_TRUE(decode_->running()) << decode_->Log();
    EXPECT_TRUE(testing::LocalCluster::WaitForBaseline(*decode_, absl::Seconds(30), client_))
        << decode_->Log();
  }

  std::unique_ptr<NetnsTopology> net_;
  std::unique_ptr<ThrowawayPki> pki_;
  std::vector<std::vector<std::string>> tls_;
  GrpcSecurity client_;
  std::unique_ptr<ChildProcess> router_;
  std::unique_ptr<ChildProcess> prefill_;
  std::unique_ptr<ChildProcess> decode_;
};

TEST_F(NetnsClusterTest, AnOffloadedRequestCrossesThreeHostsOverTlsAndUcxTcp) {
  const auto out = Generate();
  ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << decode_->Log();
  const v1::Placement& p = out.result.placement();
  EXPECT_EQ(p.mode(), v1::PLACEMENT_MODE_OFFLOAD);
  EXPECT_FALSE(p.fell_back_to_local()) << decode_->Log();
  EXPECT_GT(p.transfer_bytes(), 0) << "no KV crossed the network";
  EXPECT_FALSE(out.tokens.empty());
}

TEST_F(NetnsClusterTest, APartitionedPrefillHostIsRoutedAroundAndRejoinsWhenItHeals) {
  ASSERT_TRUE(net_->SetConnected(kPrefill, false).ok());
  // The router stops hearing from it and drops it; prompts prefill on the decode worker.
  ASSERT_TRUE(WaitForWorkers(1)) << router_->Log();
  const auto during = Generate();
  ASSERT_TRUE(during.status.ok()) << during.status.error_message();
  EXPECT_EQ(during.result.placement().mode(), v1::PLACEMENT_MODE_LOCAL);
  // Healed: the prefill worker reconnects and registers again, and takes offloads.
  ASSERT_TRUE(net_->SetConnected(kPrefill, true).ok());
  ASSERT_TRUE(WaitForWorkers(2)) << prefill_->Log();
  const auto after = Generate();
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.result.placement().mode(), v1::PLACEMENT_MODE_OFFLOAD);
  EXPECT_FALSE(after.result.placement().fell_back_to_local()) << decode_->Log();
  EXPECT_EQ(after.tokens, during.tokens) << "same prompt, same greedy tokens either way";
  EXPECT_TRUE(prefill_->running() && decode_->running() && router_->running());
  EXPECT_TRUE(testing::LocalCluster::WaitForBaseline(*decode_, absl::Seconds(20), client_));
}

TEST_F(NetnsClusterTest, APartitionDuringATransferEndsInAFallbackOrATypedError) {
  client::GenerationOutcome cut;
  std::thread request([&] { cut = Generate(); });
  // The transfer takes 4 x 150 ms of layer pauses; cut the prefill host in its middle.
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_TRUE(net_->SetConnected(kPrefill, false).ok());
  request.join();
  std::cout << "request cut mid-transfer: " << cut.status.error_code() << " "
            << cut.result.placement().ShortDebugString() << "\n";
  if (cut.status.ok()) {
    EXPECT_TRUE(cut.result.placement().fell_back_to_local() ||
                cut.result.placement().mode() == v1::PLACEMENT_MODE_LOCAL)
        << "an offload whose prefill host was cut off claims to have succeeded";
  } else {
    EXPECT_TRUE(cut.status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                cut.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
        << cut.status.error_code() << ": " << cut.status.error_message();
  }
  ASSERT_TRUE(net_->SetConnected(kPrefill, true).ok());
  ASSERT_TRUE(WaitForWorkers(2)) << prefill_->Log();
  const auto after = Generate();
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
  // The invariants: every process up, the decode worker's blocks back at baseline.
  ExpectRecovered();
}

// Prompts of 300 tokens: about 600 KiB of KV (tiny model: 2 KiB a token), many TCP segments
// per transfer. Each test prompt is new to the decode worker (a prefix-cache hit would leave
// little to transfer); its reference tokens come from the engine in this process.
std::vector<int32_t> LongPrompt(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> prompt(300);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 1000);
  return prompt;
}

std::vector<int32_t> Reference(const std::vector<int32_t>& prompt, int max_tokens) {
  static testing::GreedyReference* reference = new testing::GreedyReference("tiny");
  return reference->Generate(prompt, max_tokens);
}

// Link faults without netem (tools/testbed/netns_topology.h): random loss on both hosts of
// the transfer, both ways. TCP retransmits under UCX and gRPC: every request completes with
// the tokens it gets alone (offloaded or fallen back, never corrupted), and the loss program
// did drop packets.
TEST_F(NetnsClusterTest, LossyLinksSlowTransfersButNeverCorruptThem) {
  absl::Status lossy = net_->SetLoss(kPrefill, 5, testbed::LinkDirection::kBoth);
  if (!lossy.ok()) GTEST_SKIP() << "no BPF loss here: " << lossy;
  ASSERT_TRUE(net_->SetLoss(kDecode, 2, testbed::LinkDirection::kBoth).ok());
  int offloaded = 0;
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const std::vector<int32_t> prompt = LongPrompt(seed);
    const auto out = Generate(prompt, 6);
    ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << decode_->Log();
    EXPECT_EQ(out.tokens, Reference(prompt, 6)) << "seed " << seed;
    const v1::Placement& p = out.result.placement();
    offloaded += p.mode() == v1::PLACEMENT_MODE_OFFLOAD && !p.fell_back_to_local() ? 1 : 0;
  }
  const int64_t dropped = net_->DroppedPackets(kPrefill, testbed::LinkDirection::kBoth);
  std::cout << offloaded << " of 3 offloads completed over the lossy links; " << dropped
            << " packets (segmentation-offloaded: up to 64 KiB each) dropped on the prefill "
               "host's link\n";
  EXPECT_GT(dropped, 0) << "the loss program dropped nothing: the fault did not act";
  ASSERT_TRUE(net_->SetLoss(kPrefill, 0, testbed::LinkDirection::kBoth).ok());
  ASSERT_TRUE(net_->SetLoss(kDecode, 0, testbed::LinkDirection::kBoth).ok());
  ExpectRecovered();
}

// A slow link (tbf, 8 Mbit/s out of the prefill host): the transfer completes intact and
// takes at least what the rate allows for its bytes.
TEST_F(NetnsClusterTest, ARateLimitedLinkCarriesTransfersIntactAtItsRate) {
  constexpr double kMbit = 8;
  ASSERT_TRUE(net_->SetRate(kPrefill, kMbit, testbed::LinkDirection::kFromHost).ok());
  const std::vector<int32_t> prompt = LongPrompt(7);
  const absl::Time start = absl::Now();
  const auto out = Generate(prompt, 6);
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << decode_->Log();
  EXPECT_EQ(out.tokens, Reference(prompt, 6));
  const v1::Placement& p = out.result.placement();
  ASSERT_EQ(p.mode(), v1::PLACEMENT_MODE_OFFLOAD);
  ASSERT_FALSE(p.fell_back_to_local()) << p.ShortDebugString() << "\n" << decode_->Log();
  ASSERT_GT(p.transfer_bytes(), 256 * 1024) << p.ShortDebugString();
  // tbf lets one 32 KiB burst through at once; the rest goes at the rate.
  const double floor_s = (static_cast<double>(p.transfer_bytes()) - 32 * 1024) * 8 / (kMbit * 1e6);
  std::cout << p.transfer_bytes() << " bytes of KV in " << took << " at " << kMbit
            << " Mbit/s (no faster than " << floor_s << " s)\n";
  EXPECT_GE(absl::ToDoubleSeconds(took), floor_s) << "the transfer did not cross the limited link";
  ASSERT_TRUE(net_->SetRate(kPrefill, 0, testbed::LinkDirection::kFromHost).ok());
  ExpectRecovered();
}

// One direction cut mid-transfer (100 % loss one way: the other way still delivers, so
// neither end sees its link go down): the request falls back with the tokens it gets alone,
// or ends with a typed error, and once healed everything is back, for each direction in turn.
TEST_F(NetnsClusterTest, AOneWayCutMidTransferEndsInAFallbackAndHeals) {
  uint32_t seed = 11;
  for (const auto direction :
       {testbed::LinkDirection::kToHost, testbed::LinkDirection::kFromHost}) {
    SCOPED_TRACE(direction == testbed::LinkDirection::kToHost ? "to the prefill host"
                                                              : "from the prefill host");
    // The prefill worker may still be registering again after the previous cut: the cut
    // must fall on an offload, not on a prompt placed locally for want of a prefill worker.
    ASSERT_TRUE(WaitUntilOffloading()) << prefill_->Log();
    const std::vector<int32_t> prompt = LongPrompt(seed++);
    client::GenerationOutcome cut;
    std::thread request([&] { cut = Generate(prompt, 6); });
    absl::SleepFor(absl::Milliseconds(300));  // Inside the transfer's 4 x 150 ms of layers.
    absl::Status s = net_->SetLoss(kPrefill, 100, direction);
    request.join();
    if (!s.ok()) GTEST_SKIP() << "no BPF loss here: " << s;
    std::cout << "one way cut mid-transfer: " << cut.status.error_code() << " "
              << cut.result.placement().ShortDebugString() << "\n";
    if (cut.status.ok()) {
      EXPECT_EQ(cut.tokens, Reference(prompt, 6));
      // Cut toward the prefill host, only TCP's acknowledgements are lost: the KV and the
      // prefill worker's answers travel the other way, and a transfer that fits in TCP's
      // first window (10 segments of up to 64 KiB with segmentation offload; this one is
      // ~600 KiB) lands whole without one. Seen in CI: an intact offload, the right tokens.
      // Cut from it, the KV cannot arrive: the offload must not claim it did.
      if (direction == testbed::LinkDirection::kFromHost) {
        EXPECT_TRUE(cut.result.placement().fell_back_to_local() ||
                    cut.result.placement().mode() == v1::PLACEMENT_MODE_LOCAL)
            << "an offload whose KV's way was cut claims to have succeeded";
      }
    } else {
      EXPECT_TRUE(cut.status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                  cut.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
          << cut.status.error_code() << ": " << cut.status.error_message();
    }
    EXPECT_GT(net_->DroppedPackets(kPrefill, direction), 0);
    ASSERT_TRUE(net_->SetLoss(kPrefill, 0, direction).ok());
    ASSERT_TRUE(WaitForWorkers(2)) << prefill_->Log();
    ExpectRecovered();
  }
  // Healed both ways: offloads complete again.
  const std::vector<int32_t> prompt = LongPrompt(seed);
  const auto after = Generate(prompt, 6);
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.tokens, Reference(prompt, 6));
  EXPECT_FALSE(after.result.placement().fell_back_to_local()) << decode_->Log();
}

// Two routers behind one name, as a Kubernetes headless Service answers: the decode worker's
// host resolves routers.pdserve.test to both routers' addresses (its own /etc/hosts), and
// --router names it once. The worker registers with both over mutual TLS (the routers'
// certificates carry that name, which the worker checks although it dials their IPs); when
// one router's host is cut off, it stays registered with the other, and rejoins when healed.
TEST(NetnsMultiRouterTest, OneNameForTwoRoutersRegistersWithBoth) {
  constexpr size_t kRouterA = 0;
  constexpr size_t kRouterB = 1;
  constexpr size_t kWorker = 2;
  auto topology = NetnsTopology::Create({"router-a", "router-b", "worker"});
  if (!topology.ok()) GTEST_SKIP() << "no network namespaces here: " << topology.status();
  auto& net = **topology;
  const std::string name = "routers.pdserve.test";
  ASSERT_TRUE(net.SetHosts(kWorker,
                           {{net.host(kRouterA).address, name}, {net.host(kRouterB).address, name}})
                  .ok());
  auto pki = ThrowawayPki::Create("pdserve-netns-ca");
  ASSERT_TRUE(pki.ok()) << pki.status();
  std::vector<std::vector<std::string>> tls;
  for (size_t i = 0; i < 3; ++i) {
    auto cert = (*pki)->Issue(absl::StrCat("host", i), absl::StrCat("host", i),
                              {"IP:" + net.host(i).address, "DNS:" + name});
    ASSERT_TRUE(cert.ok()) << cert.status();
    tls.push_back(TlsFlags((*pki)->Config(*cert, /*require_client_cert=*/true)));
  }
  auto client_cert = (*pki)->Issue("client", "client", {});
  ASSERT_TRUE(client_cert.ok());
  auto client = GrpcSecurity::FromConfig((*pki)->Config(*client_cert));
  ASSERT_TRUE(client.ok());

  const std::string model = "--model=" + testing::TestModelDir("tiny");
  const int registry_port = PickFreeLoopbackPort();  // Free in the fresh namespaces too.
  std::unique_ptr<ChildProcess> routers[2];
  for (const size_t host : {kRouterA, kRouterB}) {
    const std::string address = net.host(host).address;
    routers[host] = StartOnHost(net, host, "pdserve-router",
                                {model, absl::StrCat("--listen=", address, ":0"),
                                 absl::StrCat("--registry_listen=", address, ":", registry_port),
                                 absl::StrCat("--metrics_listen=", address, ":0"),
                                 "--worker_timeout=1s", "--drain_timeout=5s"},
                                tls[host], *client);
    ASSERT_NE(routers[host], nullptr);
  }
  auto decode = StartOnHost(
      net, kWorker, "pdserve-decode",
      {model, "--threads=1", "--kv_cache_bytes=67108864", "--drain_timeout=5s",
       absl::StrCat("--listen=", net.host(kWorker).address, ":0"),
       absl::StrCat("--metrics_listen=", net.host(kWorker).address, ":0"), "--kv_transport=none",
       absl::StrCat("--router=", name, ":", registry_port), "--worker_id=decode-0"},
      tls[kWorker], *client);
  ASSERT_NE(decode, nullptr);
  for (const auto& router : routers) {
    EXPECT_TRUE(testing::PollUntil(
        [&] { return RegisteredWorkers(router->internal_grpc_address(), *client) == 1; },
        absl::Seconds(30), absl::Milliseconds(100)))
        << router->Log() << decode->Log();
  }
  auto registered_routers = [&] {
    return testing::Metric(decode->metrics_address(), "pdserve_registered_routers");
  };
  EXPECT_EQ(registered_routers(), 2);
  // Router A's host is cut off (no FIN, no RST): the worker's keepalive notices within about
  // 15 s; it stays registered with B, and B serves. Healed, it registers with A again.
  ASSERT_TRUE(net.SetConnected(kRouterA, false).ok());
  EXPECT_TRUE(testing::PollUntil([&] { return registered_routers() == 1; }, absl::Seconds(40),
                                 absl::Milliseconds(100)));
  EXPECT_EQ(RegisteredWorkers(routers[kRouterB]->internal_grpc_address(), *client), 1);
  const auto out = client::CallGenerate(MakeChannel(routers[kRouterB]->grpc_address(), *client),
                                        client::MakeRequest({3, 1, 4, 1, 5}, 3), absl::Seconds(60));
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
  ASSERT_TRUE(net.SetConnected(kRouterA, true).ok());
  EXPECT_TRUE(testing::PollUntil([&] { return registered_routers() == 2; }, absl::Seconds(60),
                                 absl::Milliseconds(100)));
}

}  // namespace
}  // namespace pdserve
