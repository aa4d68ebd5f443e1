// A whole cluster with mutual TLS on every gRPC link (client -> router, router -> decode,
// decode -> prefill, workers -> the router's registry listener), certificates made by openssl
// at test time: requests are served and offloaded as in plaintext; clients and workers without
// a certificate from the cluster's CA are refused; the registry is only on its own listener;
// with --worker_id_uri_prefix a worker's id is proved by its certificate, so that a process
// with another certificate from the CA cannot take the id of a worker that is away.
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <map>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "server/child_process.h"
#include "tests/router/cluster_fixture.h"
#include "tests/testing/poll.h"
#include "tests/testing/test_models.h"
#include "tools/client/generation_client.h"
#include "tools/testbed/throwaway_pki.h"

namespace pdserve::router {
namespace {

using pdserve::testbed::IssuedCert;
using pdserve::testbed::ThrowawayPki;
using pdserve::testbed::TlsFlags;
using pdserve::testing::ClusterOptions;
using pdserve::testing::LocalCluster;

class TlsClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pki = ThrowawayPki::Create("pdserve-cluster-ca");
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *std::move(pki);
    for (const char* name : {"router", "decode", "prefill", "client"}) {
      auto cert = pki_->Issue(name, name);
      ASSERT_TRUE(cert.ok()) << cert.status();
      certs_[name] = *cert;
    }
  }

  GrpcSecurity Security(const TlsConfig& config) {
    auto security = GrpcSecurity::FromConfig(config);
    EXPECT_TRUE(security.ok()) << security.status();
    return security.ok() ? *security : GrpcSecurity();
  }

  // Every process requires client certificates; the registry has its own listener.
  ClusterOptions MutualTlsCluster(bool require_client_cert = true) {
    ClusterOptions options{.prefill_workers = 1, .decode_workers = 1};
    options.router_flags = TlsFlags(pki_->Config(certs_["router"], require_client_cert));
    options.router_flags.push_back("--registry_listen=127.0.0.1:0");
    options.router_flags.push_back("--policy=always_offload");
    options.decode_flags = TlsFlags(pki_->Config(certs_["decode"], require_client_cert));
    options.prefill_flags = TlsFlags(pki_->Config(certs_["prefill"], require_client_cert));
    options.security = Security(pki_->Config(certs_["client"]));
    return options;
  }

  std::unique_ptr<ThrowawayPki> pki_;
  std::map<std::string, IssuedCert> certs_;
};

v1::GenerateRequest Request() { return client::MakeRequest({5, 6, 7, 8, 9, 10, 11, 12}, 4); }

TEST_F(TlsClusterTest, EveryLinkSpeaksMutualTlsAndOffloadedRequestsComplete) {
  auto cluster = LocalCluster::Start(MutualTlsCluster());
  ASSERT_NE(cluster, nullptr);
  EXPECT_NE(cluster->registry_address(), cluster->router().grpc_address());
  // Offloaded: router -> decode -> prefill, KV back over UCX, tokens relayed.
  const auto out = client::CallGenerate(cluster->channel(), Request(), absl::Seconds(60));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << cluster->router().Log();
  EXPECT_EQ(out.result.placement().mode(), v1::PLACEMENT_MODE_OFFLOAD);
  EXPECT_FALSE(out.result.placement().fell_back_to_local());
  EXPECT_EQ(out.result.placement().prefill_worker_id(), "prefill-0");
  EXPECT_FALSE(out.tokens.empty());
  EXPECT_TRUE(absl::StrContains(cluster->router().Log(), "(tls)")) << cluster->router().Log();
}

TEST_F(TlsClusterTest, ClientsWithoutACertificateFromTheCaCannotGenerate) {
  auto cluster = LocalCluster::Start(MutualTlsCluster());
  ASSERT_NE(cluster, nullptr);
  const std::string router = cluster->router().grpc_address();
  auto rogue = ThrowawayPki::Create("rogue-ca");
  ASSERT_TRUE(rogue.ok()) << rogue.status();
  auto impostor = (*rogue)->Issue("client", "impostor");
  ASSERT_TRUE(impostor.ok()) << impostor.status();
  TlsConfig no_cert{.ca_file = pki_->ca_file()};
  TlsConfig wrong_ca{
      .cert_file = impostor->cert_file, .key_file = impostor->key_file, .ca_file = pki_->ca_file()};
  const std::pair<std::string, GrpcSecurity> clients[] = {
      {"plaintext", GrpcSecurity()},
      {"TLS without a client certificate", Security(no_cert)},
      {"a certificate from another CA", Security(wrong_ca)},
  };
  for (const auto& [what, security] : clients) {
    const auto out =
        client::CallGenerate(client::MakeChannel(router, security), Request(), absl::Seconds(10));
    EXPECT_EQ(out.status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << what << ": " << out.status.error_message();
  }
  // The cluster still serves its own clients.
  EXPECT_TRUE(client::CallGenerate(cluster->channel(), Request(), absl::Seconds(60)).status.ok());
}

TEST_F(TlsClusterTest, WorkersWithoutAValidCertificateCannotRegister) {
  // The public listener does not demand client certificates here; the registry still does.
  auto cluster = LocalCluster::Start(MutualTlsCluster(/*require_client_cert=*/false));
  ASSERT_NE(cluster, nullptr);
  auto rogue = ThrowawayPki::Create("rogue-ca");
  ASSERT_TRUE(rogue.ok()) << rogue.status();
  auto impostor = (*rogue)->Issue("decode", "impostor");
  ASSERT_TRUE(impostor.ok()) << impostor.status();
  struct Attempt {
    std::string what;
    TlsConfig tls;
  };
  // Each trusts the router's CA (so it could talk to it) but cannot prove itself.
  const Attempt attempts[] = {
      {"no-cert", TlsConfig{.ca_file = pki_->ca_file()}},
      {"other-ca", TlsConfig{.cert_file = impostor->cert_file,
                             .key_file = impostor->key_file,
                             .ca_file = pki_->ca_file()}},
  };
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (const Attempt& a : attempts) {
    std::vector<std::string> args = {"--model=" + pdserve::testing::TestModelDir("tiny"),
                                     "--threads=1",
                                     "--num_blocks=64",
                                     "--kv_transport=none",
                                     "--worker_id=" + a.what,
                                     "--router=" + cluster->registry_address()};
    for (const std::string& f : TlsFlags(a.tls)) args.push_back(f);
    // A worker without a certificate cannot serve TLS either: it refuses to start.
    auto worker = ChildProcess::Start(
        ChildOptions{.binary = "pdserve-decode", .args = args, .expect_serving_info = false});
    ASSERT_TRUE(worker.ok()) << worker.status();
    workers.push_back(*std::move(worker));
  }
  // The certificate-less worker exits with a configuration error naming the flag.
  const std::optional<int> exit = workers[0]->WaitExit(absl::Seconds(30));
  ASSERT_TRUE(exit.has_value()) << workers[0]->Log();
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 1) << workers[0]->Log();
  EXPECT_TRUE(absl::StrContains(workers[0]->Log(), "--tls_cert: required to serve TLS"))
      << workers[0]->Log();
  // The impostor runs, but its registration never gets through the handshake.
  EXPECT_FALSE(pdserve::testing::PollUntil([&] { return cluster->Status().workers_size() > 2; },
                                           absl::Seconds(3), absl::Milliseconds(100)))
      << "a worker without a certificate from the CA registered";
  EXPECT_TRUE(workers[1]->running()) << workers[1]->Log();
  const v1::ClusterStatus status = cluster->Status();
  for (const v1::WorkerStatus& w : status.workers()) {
    EXPECT_NE(w.registration().worker_id(), "other-ca");
  }
  // A client without a certificate may generate (the public listener does not demand one).
  TlsConfig no_cert{.ca_file = pki_->ca_file()};
  const auto out =
      client::CallGenerate(client::MakeChannel(cluster->router().grpc_address(), Security(no_cert)),
                           Request(), absl::Seconds(60));
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
}

// The takeover the hostile review found: a decode worker paused past the worker timeout is
// dropped, and a process holding a certificate from the cluster's CA registers its id (its own
// address answers as that id, so address verification passes). With ids bound to certificates
// the impostor is refused, whatever certificate from the CA it holds, and the real worker
// takes its id back when it resumes.
TEST_F(TlsClusterTest, AWorkerIdIsProvedByItsCertificateAndAnImpostorCannotTakeIt) {
  const std::string prefix = "spiffe://pdserve/worker/";
  std::map<std::string, IssuedCert> bound;
  for (const char* id : {"decode-0", "prefill-0"}) {
    auto cert = pki_->Issue(id, absl::StrCat(id, "-bound"),
                            {"IP:127.0.0.1", "DNS:localhost", "URI:" + prefix + id});
    ASSERT_TRUE(cert.ok()) << cert.status();
    bound[id] = *cert;
  }
  ClusterOptions options = MutualTlsCluster();
  options.router_flags.push_back("--worker_id_uri_prefix=" + prefix);
  options.router_flags.push_back("--worker_timeout=1s");
  options.decode_flags = TlsFlags(pki_->Config(bound["decode-0"], true));
  options.prefill_flags = TlsFlags(pki_->Config(bound["prefill-0"], true));
  auto cluster = LocalCluster::Start(options);
  ASSERT_NE(cluster, nullptr) << "workers with certificates naming their ids did not register";
  const auto served = client::CallGenerate(cluster->channel(), Request(), absl::Seconds(60));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.result.placement().mode(), v1::PLACEMENT_MODE_OFFLOAD);

  ChildProcess& real = *cluster->decode()[0];
  ASSERT_EQ(kill(real.pid(), SIGSTOP), 0);
  ASSERT_TRUE(cluster->WaitForWorkers(0, 1, absl::Seconds(15))) << cluster->router().Log();
  // Impostors claiming decode-0, each with a valid certificate from the CA: the prefill
  // worker's (naming prefill-0), a client's (naming no worker).
  std::vector<std::unique_ptr<ChildProcess>> impostors;
  for (const IssuedCert& cert : {bound["prefill-0"], certs_["client"]}) {
    std::vector<std::string> args = {"--model=" + pdserve::testing::TestModelDir("tiny"),
                                     "--threads=1",
                                     "--num_blocks=64",
                                     "--kv_transport=none",
                                     "--worker_id=decode-0",
                                     "--router=" + cluster->registry_address()};
    for (const std::string& f : TlsFlags(pki_->Config(cert, true))) args.push_back(f);
    auto impostor = ChildProcess::Start(
        ChildOptions{.binary = "pdserve-decode", .args = args, .security = options.security});
    ASSERT_TRUE(impostor.ok()) << impostor.status();
    impostors.push_back(*std::move(impostor));
  }
  EXPECT_FALSE(pdserve::testing::PollUntil([&] { return cluster->Status().workers_size() > 1; },
                                           absl::Seconds(3), absl::Milliseconds(100)))
      << "an impostor registered as decode-0\n"
      << cluster->router().Log();
  for (auto& impostor : impostors) {
    EXPECT_TRUE(pdserve::testing::PollUntil(
        [&] { return absl::StrContains(impostor->Log(), "not named by the client certificate"); },
        absl::Seconds(10), absl::Milliseconds(100)))
        << "the impostor was not told why\n"
        << impostor->Log();
  }
  // The real worker resumes and takes its id back, at its own address.
  ASSERT_EQ(kill(real.pid(), SIGCONT), 0);
  ASSERT_TRUE(cluster->WaitForWorkers(1, 1, absl::Seconds(15))) << real.Log();
  bool found = false;
  const v1::ClusterStatus after = cluster->Status();
  for (const v1::WorkerStatus& w : after.workers()) {
    if (w.registration().worker_id() != "decode-0") continue;
    found = true;
    EXPECT_EQ(w.registration().grpc_address(), real.grpc_address());
  }
  EXPECT_TRUE(found);
  EXPECT_TRUE(client::CallGenerate(cluster->channel(), Request(), absl::Seconds(60)).status.ok());
}

TEST_F(TlsClusterTest, TheRegistryIsNotServedOnThePublicListener) {
  auto cluster = LocalCluster::Start(MutualTlsCluster());
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Registry::NewStub(cluster->channel());  // The public listener.
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::ClusterStatus status;
  const grpc::Status s = stub->GetClusterStatus(&context, v1::ClusterStatusRequest(), &status);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << s.error_message();
  EXPECT_EQ(cluster->Status().workers_size(), 2);  // The registry listener has them.
}

// Every probe the chart renders with tls.enabled (the kubelet's own gRPC probe speaks no TLS,
// so those pods never became ready) is a `pdctl health` command over TLS. Each rendered command
// (from the TLS scenario's golden render) runs here against every process of a mutual-TLS
// cluster whose certificates name the chart's tls.serverName, with the pod's files replaced by
// this cluster's: each answers SERVING. The same check without TLS, as the kubelet's probe
// would make it, fails.
TEST_F(TlsClusterTest, TheChartsTlsProbesPassAgainstATlsCluster) {
  const std::vector<std::string> sans = {"IP:127.0.0.1", "DNS:localhost", "DNS:pdserve.internal"};
  std::map<std::string, IssuedCert> certs;
  for (const char* name : {"router", "decode", "prefill"}) {
    auto cert = pki_->Issue(name, absl::StrCat(name, "-internal"), sans);
    ASSERT_TRUE(cert.ok()) << cert.status();
    certs[name] = *cert;
  }
  ClusterOptions options{.prefill_workers = 1, .decode_workers = 1};
  options.router_flags = TlsFlags(pki_->Config(certs["router"], true));
  options.decode_flags = TlsFlags(pki_->Config(certs["decode"], true));
  options.prefill_flags = TlsFlags(pki_->Config(certs["prefill"], true));
  options.security = Security(pki_->Config(certs_["client"]));
  auto cluster = LocalCluster::Start(options);
  ASSERT_NE(cluster, nullptr);

  // The probe commands of the rendered chart: each "command:" list of the golden render.
  std::ifstream golden(std::string(PDSERVE_SOURCE_DIR) +
                       "/tests/deploy/helm/golden/scale-2p4d.yaml");
  std::vector<std::vector<std::string>> commands;
  std::string line;
  static const std::regex kItem(R"(^\s+- (.*)$)");
  bool in_command = false;
  while (std::getline(golden, line)) {
    std::smatch m;
    if (absl::StrContains(line, "command:")) {
      commands.emplace_back();
      in_command = true;
    } else if (in_command && std::regex_match(line, m, kItem)) {
      commands.back().push_back(m[1].str());
    } else {
      in_command = false;
    }
  }
  std::erase_if(commands, [](const auto& c) { return c.size() < 2 || c[1] != "health"; });
  ASSERT_GE(commands.size(), 6u) << "the TLS render has no pdctl health probes";

  const std::pair<std::string, ChildProcess*> processes[] = {
      {"router", &cluster->router()},
      {"decode", cluster->decode()[0].get()},
      {"prefill", cluster->prefill()[0].get()}};
  auto run = [](const std::vector<std::string>& args) {
    auto child = ChildProcess::Start(
        ChildOptions{.binary = "pdctl", .args = args, .expect_serving_info = false});
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return std::make_pair(-1, std::string());
    auto status = (*child)->WaitExit(absl::Seconds(30));
    const int code = status.has_value() && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
    return std::make_pair(code, (*child)->Log());
  };
  static const std::regex kAddress(R"(--address=127\.0\.0\.1:[0-9]+)");
  for (const auto& command : commands) {
    for (const auto& [role, process] : processes) {
      std::vector<std::string> args(command.begin() + 1, command.end());
      for (std::string& a : args) {
        a = std::regex_replace(a, kAddress, "--address=" + process->grpc_address());
        a = absl::StrReplaceAll(a, {{"/etc/pdserve/tls/tls.crt", certs[role].cert_file},
                                    {"/etc/pdserve/tls/tls.key", certs[role].key_file},
                                    {"/etc/pdserve/tls/ca.crt", pki_->ca_file()}});
      }
      // As the kubelet does, a probe is tried again (readiness follows the registry's sweep).
      std::pair<int, std::string> result;
      for (int attempt = 0; attempt < 20; ++attempt) {
        result = run(args);
        if (result.first == 0) break;
        absl::SleepFor(absl::Milliseconds(250));
      }
      EXPECT_EQ(result.first, 0) << role << ": pdctl " << absl::StrJoin(args, " ") << "\n"
                                 << result.second;
    }
  }
  // What the kubelet's gRPC probe does: plaintext. It cannot pass against a TLS listener.
  const auto [code, log] = run({"health", "--address=" + cluster->router().grpc_address(),
                                "--service=pdserve.live", "--health_timeout=2s"});
  EXPECT_NE(code, 0) << log;
}

}  // namespace
}  // namespace pdserve::router
