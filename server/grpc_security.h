// Transport security of pdserve's gRPC links. A process has one identity (certificate and key,
// PEM files) and one CA bundle: it presents the identity when it serves and when it calls
// (mutual TLS), and trusts peers the CA signed. The files are re-read while the process runs
// (every `reload_interval`), so certificates rotate without a restart; install a new pair
// atomically (write both files elsewhere, then rename, or swap a directory symlink).
//
// Plaintext stays the default: links on one host are loopback-only. A plaintext listener on
// any other interface is allowed but logged as a warning (grpc_server.cc).
// Thread-safety: GrpcSecurity is an immutable value; copies share one file watcher.
#ifndef PDSERVE_SERVER_GRPC_SECURITY_H_
#define PDSERVE_SERVER_GRPC_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
class ChannelArguments;
}  // namespace grpc

namespace pdserve {

struct TlsConfig {
  // This process's certificate chain and private key (PEM). Both or neither. Without them the
  // process can still call TLS servers (verifying them with `ca_file`) but cannot serve TLS.
  std::string cert_file;
  std::string key_file;
  // CA bundle (PEM) that signs the certificates of peers this process accepts. Empty: the
  // system's roots verify servers, and client certificates cannot be required.
  std::string ca_file;
  // Servers: refuse clients without a certificate `ca_file` signed. (The router's registry
  // listener requires one whenever TLS is on, whatever this says.)
  bool require_client_cert = false;
  // Clients: the name servers' certificates must carry; empty: the host of the address called.
  // Lets one internal name (e.g. pdserve.internal) stand for workers whose addresses are
  // pod IPs.
  std::string server_name;
  // How often the files are checked for new contents; at least 1 s.
  absl::Duration reload_interval = absl::Seconds(60);

  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
  // Checks the combination and that each file is readable and holds the PEM blocks it should;
  // errors name the flag (--tls_cert, --tls_key, --tls_ca, ...).
  absl::Status Validate() const;
};

class GrpcSecurity {
 public:
  // Plaintext.
  GrpcSecurity() = default;
  // TLS from `config` (validated here); plaintext when `config` is not enabled().
  static absl::StatusOr<GrpcSecurity> FromConfig(const TlsConfig& config);

  bool tls() const { return channel_credentials_ != nullptr; }
  // Whether this process can serve TLS (it has a certificate).
  bool can_serve_tls() const { return server_credentials_ != nullptr; }
  bool requires_client_cert() const { return require_client_cert_; }

  // Credentials for a channel; plaintext ones when !tls().
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;
  // This security with `name` as the server name when none is configured: a channel to an
  // address resolved from `name` still checks the certificate against `name`.
  GrpcSecurity WithDefaultServerName(const std::string& name) const {
    GrpcSecurity copy = *this;
    if (copy.server_name_.empty()) copy.server_name_ = name;
    return copy;
  }
  // Adds the server-name override, if any, to a channel's arguments.
  void AddChannelArguments(grpc::ChannelArguments& args) const;
  // Credentials for a listener: plaintext when !tls(); with a certificate required from
  // clients when `require_client_cert` (the config's value or a listener's own demand).
  // Fails when TLS is on and this process has no certificate.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
      bool require_client_cert) const;

 private:
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials_;
  std::shared_ptr<grpc::ServerCredentials> server_credentials_;
  std::shared_ptr<grpc::ServerCredentials> server_credentials_mtls_;
  std::string server_name_;
  bool require_client_cert_ = false;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVER_GRPC_SECURITY_H_
