#include "server/grpc_security.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/support/channel_arguments.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve {
namespace {

// A certificate bundle or key file larger than this is not one.
constexpr size_t kMaxPemBytes = 1 << 20;

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using UniqueBio = std::unique_ptr<BIO, BioDeleter>;
using UniqueX509 = std::unique_ptr<X509, X509Deleter>;
using UniqueKey = std::unique_ptr<EVP_PKEY, KeyDeleter>;

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::ostringstream out;
  out << in.rdbuf();
  std::string text = out.str();
  if (text.size() > kMaxPemBytes) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", path, "' is ", text.size(),
                                                   " bytes, over the limit ", kMaxPemBytes));
  }
  return text;
}

UniqueBio BioOf(const std::string& text) {
  return UniqueBio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// The certificates in `path`, in order; an error naming `flag` when there are none or one is
// not valid now.
absl::StatusOr<std::vector<UniqueX509>> ReadCertificates(const std::string& path,
                                                         const char* flag) {
  ASSIGN_OR_RETURN(std::string text, ReadPem(path, flag));
  UniqueBio bio = BioOf(text);
  std::vector<UniqueX509> certs;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certs.emplace_back(x);
  }
  ERR_clear_error();  // The end of the file reads as an error.
  if (certs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", path, "' holds no PEM certificate (BEGIN CERTIFICATE)"));
  }
  for (const UniqueX509& c : certs) {
    if (X509_cmp_current_time(X509_get0_notAfter(c.get())) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": a certificate in '", path, "' has expired"));
    }
  }
  return certs;
}

absl::StatusOr<UniqueKey> ReadKey(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadPem(path, "--tls_key"));
  UniqueBio bio = BioOf(text);
  UniqueKey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key: '", path, "' holds no unencrypted PEM private key (BEGIN PRIVATE KEY)"));
  }
  return key;
}

}  // namespace

absl::Status TlsConfig::Validate() const {
  if (!enabled()) {
    if (require_client_cert) {
      return absl::InvalidArgumentError(
          "--tls_require_client_cert: needs --tls_ca, --tls_cert and --tls_key");
    }
    return absl::OkStatus();
  }
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(cert_file.empty() ? "--tls_cert: required with --tls_key"
                                                        : "--tls_key: required with --tls_cert");
  }
  if (require_client_cert && ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_ca: required with --tls_require_client_cert (the CA that signs client "
        "certificates)");
  }
  if (reload_interval < absl::Seconds(1) || reload_interval > absl::Hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_reload_interval: ", absl::FormatDuration(reload_interval), " is outside [1s, 24h]"));
  }
  if (!ca_file.empty()) RETURN_IF_ERROR(ReadCertificates(ca_file, "--tls_ca").status());
  if (!cert_file.empty()) {
    ASSIGN_OR_RETURN(std::vector<UniqueX509> chain, ReadCertificates(cert_file, "--tls_cert"));
    ASSIGN_OR_RETURN(UniqueKey key, ReadKey(key_file));
    if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError(absl::StrCat("--tls_key: '", key_file,
                                                     "' is not the key of the certificate in '",
                                                     cert_file, "' (--tls_cert)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<GrpcSecurity> GrpcSecurity::FromConfig(const TlsConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  GrpcSecurity security;
  if (!config.enabled()) return security;
  const unsigned interval = static_cast<unsigned>(absl::ToInt64Seconds(config.reload_interval));
  // One watcher (one thread) serves every credential of the process.
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      config.key_file, config.cert_file, config.ca_file, interval);
  const bool has_identity = !config.cert_file.empty();
  const bool has_roots = !config.ca_file.empty();

  grpc::experimental::TlsChannelCredentialsOptions channel;
  channel.set_certificate_provider(provider);
  if (has_roots) channel.watch_root_certs();
  if (has_identity) channel.watch_identity_key_cert_pairs();
  channel.set_verify_server_certs(true);
  security.channel_credentials_ = grpc::experimental::TlsCredentials(channel);

  if (has_identity) {
    auto make_server = [&](grpc_ssl_client_certificate_request_type request) {
      grpc::experimental::TlsServerCredentialsOptions server(provider);
      server.watch_identity_key_cert_pairs();
      if (has_roots) server.watch_root_certs();
      server.set_cert_request_type(request);
      return grpc::experimental::TlsServerCredentials(server);
    };
    security.server_credentials_ = make_server(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    if (has_roots) {
      security.server_credentials_mtls_ =
          make_server(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    }
  }
  security.server_name_ = config.server_name;
  security.require_client_cert_ = config.require_client_cert;
  return security;
}

std::shared_ptr<grpc::ChannelCredentials> GrpcSecurity::ChannelCredentials() const {
  return channel_credentials_ ? channel_credentials_ : grpc::InsecureChannelCredentials();
}

void GrpcSecurity::AddChannelArguments(grpc::ChannelArguments& args) const {
  if (tls() && !server_name_.empty()) args.SetSslTargetNameOverride(server_name_);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> GrpcSecurity::ServerCredentials(
    bool require_client_cert) const {
  if (!tls()) return grpc::InsecureServerCredentials();
  if (server_credentials_ == nullptr) {
    return absl::InvalidArgumentError(
        "--tls_cert: required to serve TLS (--tls_ca alone only lets this process call TLS "
        "servers)");
  }
  if (!require_client_cert) return server_credentials_;
  if (server_credentials_mtls_ == nullptr) {
    return absl::InvalidArgumentError(
        "--tls_ca: required to verify client certificates on a listener that demands them");
  }
  return server_credentials_mtls_;
}

}  // namespace pdserve
