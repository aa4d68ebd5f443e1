#include "tools/testbed/throwaway_pki.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pdserve::testbed {
namespace {

// Runs `command` in a shell with its output in `log`; an error quoting the log on failure.
absl::Status Run(const std::string& command, const std::string& log) {
  const std::string line = absl::StrCat("(", command, ") >", log, " 2>&1");
  if (std::system(line.c_str()) == 0) return absl::OkStatus();
  std::ifstream in(log);
  std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return absl::InternalError(absl::StrCat("`", command, "` failed: ", output));
}

constexpr char kEcKey[] = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

}  // namespace

absl::StatusOr<std::unique_ptr<ThrowawayPki>> ThrowawayPki::Create(const std::string& ca_name) {
  std::unique_ptr<ThrowawayPki> pki(new ThrowawayPki());
  std::string pattern = (std::filesystem::temp_directory_path() / "pdserve-pki-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  pki->dir_ = pattern;
  pki->ca_file_ = pki->dir_ + "/ca.crt";
  pki->ca_key_ = pki->dir_ + "/ca.key";
  const std::string command = absl::StrCat(
      "openssl req -x509 ", kEcKey, " -keyout ", pki->ca_key_, " -out ", pki->ca_file_,
      " -days 2 -subj /CN=", ca_name,
      " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign");
  if (absl::Status s = Run(command, pki->dir_ + "/ca.log"); !s.ok()) return s;
  return pki;
}

ThrowawayPki::~ThrowawayPki() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

absl::StatusOr<IssuedCert> ThrowawayPki::Issue(const std::string& common_name,
                                               const std::string& file_stem,
                                               const std::vector<std::string>& subject_alt_names) {
  const std::string stem = absl::StrCat(dir_, "/", file_stem);
  IssuedCert out{stem + ".crt", stem + ".key"};
  {
    std::ofstream ext(stem + ".ext");
    ext << "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n";
    if (!subject_alt_names.empty()) {
      ext << "subjectAltName=" << absl::StrJoin(subject_alt_names, ",") << "\n";
    }
  }
  // Write beside the final names, then rename: a watcher never sees half a file.
  const std::string command =
      absl::StrCat("openssl req ", kEcKey, " -keyout ", stem, ".key.new -out ", stem,
                   ".csr -subj /CN=", common_name, " && openssl x509 -req -in ", stem, ".csr -CA ",
                   ca_file_, " -CAkey ", ca_key_, " -CAcreateserial -days 2 -extfile ", stem,
                   ".ext -out ", stem, ".crt.new && mv ", stem, ".key.new ", out.key_file,
                   " && mv ", stem, ".crt.new ", out.cert_file);
  if (absl::Status s = Run(command, stem + ".log"); !s.ok()) return s;
  return out;
}

TlsConfig ThrowawayPki::Config(const IssuedCert& cert, bool require_client_cert) const {
  TlsConfig config;
  config.cert_file = cert.cert_file;
  config.key_file = cert.key_file;
  config.ca_file = ca_file_;
  config.require_client_cert = require_client_cert;
  return config;
}

std::vector<std::string> TlsFlags(const TlsConfig& config) {
  std::vector<std::string> flags;
  if (!config.cert_file.empty()) flags.push_back("--tls_cert=" + config.cert_file);
  if (!config.key_file.empty()) flags.push_back("--tls_key=" + config.key_file);
  if (!config.ca_file.empty()) flags.push_back("--tls_ca=" + config.ca_file);
  if (config.require_client_cert) flags.push_back("--tls_require_client_cert");
  if (!config.server_name.empty()) flags.push_back("--tls_server_name=" + config.server_name);
  flags.push_back(
      absl::StrCat("--tls_reload_interval=", absl::ToInt64Seconds(config.reload_interval), "s"));
  return flags;
}

}  // namespace pdserve::testbed
