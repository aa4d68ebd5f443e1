// TLS and mutual TLS on a real gRPC listener, with certificates made by openssl at test time.
#include "server/grpc_security.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_context.h>

#include <fstream>

#include "absl/strings/match.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/grpc_channel.h"
#include "server/grpc_server.h"
#include "server/health_client.h"
#include "tests/testing/poll.h"
#include "tools/testbed/throwaway_pki.h"

namespace pdserve {
namespace {

using testbed::IssuedCert;
using testbed::ThrowawayPki;

class GrpcSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pki = ThrowawayPki::Create("pdserve-test-ca");
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *std::move(pki);
    auto rogue = ThrowawayPki::Create("rogue-ca");
    ASSERT_TRUE(rogue.ok()) << rogue.status();
    rogue_ = *std::move(rogue);
    auto server = pki_->Issue("server", "server");
    ASSERT_TRUE(server.ok()) << server.status();
    server_cert_ = *server;
    auto client = pki_->Issue("client", "client");
    ASSERT_TRUE(client.ok()) << client.status();
    client_cert_ = *client;
    auto impostor = rogue_->Issue("client", "impostor");
    ASSERT_TRUE(impostor.ok()) << impostor.status();
    impostor_cert_ = *impostor;
  }

  GrpcSecurity Security(const TlsConfig& config) {
    auto security = GrpcSecurity::FromConfig(config);
    EXPECT_TRUE(security.ok()) << security.status();
    return security.ok() ? *security : GrpcSecurity();
  }

  std::unique_ptr<GrpcServer> Serve(const TlsConfig& config, bool always_require = false) {
    GrpcServerConfig server;
    server.security = Security(config);
    server.always_require_client_cert = always_require;
    auto started = GrpcServer::Start(server, {});
    EXPECT_TRUE(started.ok()) << started.status();
    if (!started.ok()) return nullptr;
    (*started)->SetServing(true);
    return *std::move(started);
  }

  // Whether one health check over a fresh connection secured by `client` succeeds.
  bool Reaches(const GrpcServer& server, const GrpcSecurity& client) {
    return CheckHealth(server.address(), absl::Seconds(5), client).ok();
  }

  // A client of this CA presenting `cert` (or no certificate).
  GrpcSecurity Client(const IssuedCert& cert) {
    TlsConfig config;
    config.ca_file = pki_->ca_file();
    config.cert_file = cert.cert_file;
    config.key_file = cert.key_file;
    return Security(config);
  }

  std::unique_ptr<ThrowawayPki> pki_;
  std::unique_ptr<ThrowawayPki> rogue_;
  IssuedCert server_cert_;
  IssuedCert client_cert_;
  IssuedCert impostor_cert_;
};

TEST_F(GrpcSecurityTest, TlsServerAcceptsClientsThatTrustItsCaOnly) {
  auto server = Serve(pki_->Config(server_cert_));
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(server->tls());
  EXPECT_TRUE(Reaches(*server, Client({})));
  EXPECT_FALSE(Reaches(*server, GrpcSecurity())) << "a plaintext client reached a TLS listener";
  TlsConfig other_ca;
  other_ca.ca_file = rogue_->ca_file();
  EXPECT_FALSE(Reaches(*server, Security(other_ca)))
      << "a client that does not trust the server's CA connected";
}

TEST_F(GrpcSecurityTest, MutualTlsRefusesClientsWithoutACertificateFromTheCa) {
  auto server = Serve(pki_->Config(server_cert_, /*require_client_cert=*/true));
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(Reaches(*server, Client(client_cert_)));
  EXPECT_FALSE(Reaches(*server, Client({}))) << "no client certificate, yet accepted";
  EXPECT_FALSE(Reaches(*server, Client(impostor_cert_)))
      << "a certificate from another CA was accepted";
}

TEST_F(GrpcSecurityTest, AListenerCanDemandClientCertificatesOnItsOwn) {
  // The router's registry listener: client certificates required whatever the flag says.
  auto server = Serve(pki_->Config(server_cert_), /*always_require=*/true);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(Reaches(*server, Client(client_cert_)));
  EXPECT_FALSE(Reaches(*server, Client({})));
}

TEST_F(GrpcSecurityTest, ServerNameStandsInForAddressesTheCertificateDoesNotName) {
  auto named = pki_->Issue("worker", "named", {"DNS:pdserve.internal"});
  ASSERT_TRUE(named.ok()) << named.status();
  auto server = Serve(pki_->Config(*named));
  ASSERT_NE(server, nullptr);
  EXPECT_FALSE(Reaches(*server, Client({}))) << "127.0.0.1 is not in the certificate";
  TlsConfig client;
  client.ca_file = pki_->ca_file();
  client.server_name = "pdserve.internal";
  EXPECT_TRUE(Reaches(*server, Security(client)));
}

// The common name of the certificate the server presents on a new connection.
std::string PeerCommonName(const std::string& address, const GrpcSecurity& security) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // A new connection, not a shared one.
  auto channel = grpc::CreateCustomChannel(address, security.ChannelCredentials(), args);
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  grpc::health::v1::HealthCheckResponse response;
  if (!stub->Check(&context, grpc::health::v1::HealthCheckRequest(), &response).ok()) return "";
  const auto names = context.auth_context()->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
  return names.empty() ? "" : std::string(names.front().data(), names.front().size());
}

TEST_F(GrpcSecurityTest, RotatedCertificatesAreServedWithoutARestart) {
  TlsConfig config = pki_->Config(server_cert_);
  config.reload_interval = absl::Seconds(1);
  auto server = Serve(config);
  ASSERT_NE(server, nullptr);
  const GrpcSecurity client = Client({});
  EXPECT_EQ(PeerCommonName(server->address(), client), "server");
  // Replace the pair under the same file names (what a secret rotation does).
  ASSERT_TRUE(pki_->Issue("server-rotated", "server").ok());
  EXPECT_TRUE(testing::PollUntil(
      [&] { return PeerCommonName(server->address(), client) == "server-rotated"; },
      absl::Seconds(15), absl::Milliseconds(200)))
      << "still serving the old certificate";
}

TEST(TlsConfigTest, ErrorsNameTheFlagAndTheProblem) {
  auto pki = ThrowawayPki::Create("ca");
  ASSERT_TRUE(pki.ok()) << pki.status();
  auto a = (*pki)->Issue("a", "a");
  auto b = (*pki)->Issue("b", "b");
  ASSERT_TRUE(a.ok() && b.ok());
  struct Case {
    TlsConfig config;
    std::string error;  // Empty: valid.
  };
  const std::string ca = (*pki)->ca_file();
  const Case cases[] = {
      {TlsConfig{}, ""},
      {TlsConfig{.ca_file = ca}, ""},
      {TlsConfig{.cert_file = a->cert_file, .key_file = a->key_file, .ca_file = ca}, ""},
      {TlsConfig{.cert_file = a->cert_file, .ca_file = ca}, "--tls_key: required with --tls_cert"},
      {TlsConfig{.key_file = a->key_file}, "--tls_cert: required with --tls_key"},
      {TlsConfig{.require_client_cert = true}, "--tls_require_client_cert: needs"},
      {TlsConfig{.cert_file = a->cert_file, .key_file = a->key_file, .require_client_cert = true},
       "--tls_ca: required with --tls_require_client_cert"},
      {TlsConfig{.ca_file = (*pki)->dir() + "/missing.crt"}, "--tls_ca: cannot read"},
      {TlsConfig{.ca_file = a->key_file}, "--tls_ca: '" + a->key_file + "' holds no PEM"},
      {TlsConfig{.cert_file = a->key_file, .key_file = a->key_file}, "--tls_cert: '"},
      {TlsConfig{.cert_file = a->cert_file, .key_file = a->cert_file}, "--tls_key: '"},
      {TlsConfig{.cert_file = a->cert_file, .key_file = b->key_file},
       "is not the key of the certificate"},
      {TlsConfig{.ca_file = ca, .reload_interval = absl::Milliseconds(10)},
       "--tls_reload_interval: 10ms is outside [1s, 24h]"},
  };
  for (const Case& c : cases) {
    const absl::Status s = c.config.Validate();
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_FALSE(s.ok()) << "expected: " << c.error;
      EXPECT_TRUE(absl::StrContains(s.message(), c.error)) << s << "\nexpected: " << c.error;
    }
  }
}

TEST(TlsConfigTest, AServerNeedsACertificateToServeTls) {
  auto pki = ThrowawayPki::Create("ca");
  ASSERT_TRUE(pki.ok()) << pki.status();
  auto security = GrpcSecurity::FromConfig(TlsConfig{.ca_file = (*pki)->ca_file()});
  ASSERT_TRUE(security.ok());
  GrpcServerConfig config;
  config.security = *security;
  auto server = GrpcServer::Start(config, {});
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(absl::StrContains(server.status().message(), "--tls_cert: required to serve TLS"))
      << server.status();
}

}  // namespace
}  // namespace pdserve
