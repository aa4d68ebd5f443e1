// A throw-away public-key infrastructure for TLS tests and benchmarks (mTLS between the
// namespace "hosts" of `pdserve-bench chaos --netns`): a CA made with the openssl command when
// needed in a temporary directory, and certificates it signs (EC P-256, valid 2 days, usable
// as server and client certificates). Nothing is committed; the directory goes with the
// object.
// Thread-safety: one thread.
#ifndef PDSERVE_TOOLS_TESTBED_THROWAWAY_PKI_H_
#define PDSERVE_TOOLS_TESTBED_THROWAWAY_PKI_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/grpc_security.h"

namespace pdserve::testbed {

struct IssuedCert {
  std::string cert_file;
  std::string key_file;
};

class ThrowawayPki {
 public:
  // A new CA whose certificate says CN=`ca_name`.
  static absl::StatusOr<std::unique_ptr<ThrowawayPki>> Create(const std::string& ca_name);
  ~ThrowawayPki();
  ThrowawayPki(const ThrowawayPki&) = delete;
  ThrowawayPki& operator=(const ThrowawayPki&) = delete;

  const std::string& ca_file() const { return ca_file_; }
  const std::string& dir() const { return dir_; }

  // A certificate for CN=`common_name` with `subject_alt_names` (openssl syntax, e.g.
  // "IP:127.0.0.1", "DNS:localhost"), written to <dir>/<file_stem>.crt/.key.
  absl::StatusOr<IssuedCert> Issue(const std::string& common_name, const std::string& file_stem,
                                   const std::vector<std::string>& subject_alt_names = {
                                       "IP:127.0.0.1", "DNS:localhost"});

  // A TlsConfig presenting `cert` (none when empty) and trusting this CA.
  TlsConfig Config(const IssuedCert& cert, bool require_client_cert = false) const;

 private:
  ThrowawayPki() = default;
  std::string dir_;
  std::string ca_file_;
  std::string ca_key_;
};

// The flags that give a pdserve binary `config` (--tls_cert=... and so on).
std::vector<std::string> TlsFlags(const TlsConfig& config);

}  // namespace pdserve::testbed

#endif  // PDSERVE_TOOLS_TESTBED_THROWAWAY_PKI_H_
