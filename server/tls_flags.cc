#include "server/tls_flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain this process presents (serving and, for mutual TLS, calling). "
          "With --tls_key and --tls_ca, every gRPC link of the process uses TLS.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert (unencrypted).");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle that signs the peers this process accepts (servers it calls, clients "
          "when certificates are required).");
ABSL_FLAG(bool, tls_require_client_cert, false,
          "Refuse clients without a certificate signed by --tls_ca (mutual TLS). The router's "
          "registry listener always requires one when TLS is on.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name expected in the certificates of servers this process calls (default: the host "
          "of the address).");
ABSL_FLAG(absl::Duration, tls_reload_interval, absl::Seconds(60),
          "How often the TLS files are re-read (certificate rotation without restart).");

namespace pdserve {

TlsConfig TlsConfigFromFlags() {
  TlsConfig c;
  c.cert_file = absl::GetFlag(FLAGS_tls_cert);
  c.key_file = absl::GetFlag(FLAGS_tls_key);
  c.ca_file = absl::GetFlag(FLAGS_tls_ca);
  c.require_client_cert = absl::GetFlag(FLAGS_tls_require_client_cert);
  c.server_name = absl::GetFlag(FLAGS_tls_server_name);
  c.reload_interval = absl::GetFlag(FLAGS_tls_reload_interval);
  return c;
}

}  // namespace pdserve
