#include "tests/testing/netns_topology.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace pdserve::testing {
namespace {

absl::Status Ip(const std::string& args) {
  const std::string command = absl::StrCat("ip ", args, " >/dev/null 2>&1");
  if (std::system(command.c_str()) == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("`ip ", args, "` failed"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<NetnsTopology>> NetnsTopology::Create(
    const std::vector<std::string>& names) {
  std::unique_ptr<NetnsTopology> t(new NetnsTopology());
  const int id = getpid() % 100000;
  const int subnet = 16 + getpid() % 200;  // 10.<subnet>.7.0/24, unlikely to be in use.
  const std::string prefix = absl::StrCat("10.", subnet, ".7.");
  t->bridge_ = absl::StrCat("pdbr", id);
  if (absl::Status s = Ip(absl::StrCat("link add ", t->bridge_, " type bridge")); !s.ok()) {
    return s;
  }
  if (absl::Status s = Ip(absl::StrCat("addr add ", prefix, "254/24 dev ", t->bridge_)); !s.ok()) {
    return s;
  }
  if (absl::Status s = Ip(absl::StrCat("link set ", t->bridge_, " up")); !s.ok()) return s;
  for (size_t i = 0; i < names.size(); ++i) {
    NetnsHost h{absl::StrCat("pds-", names[i], "-", id), absl::StrCat(prefix, i + 1),
                absl::StrCat("eth", i)};
    const std::string outer = absl::StrCat("pdv", id, "-", i);
    t->hosts_.push_back(h);  // Removed by the destructor even if a step below fails.
    for (const std::string& args :
         {absl::StrCat("netns add ", h.name),
          absl::StrCat("link add ", outer, " type veth peer name ", h.interface, " netns ", h.name),
          absl::StrCat("link set ", outer, " master ", t->bridge_),
          absl::StrCat("link set ", outer, " up"),
          absl::StrCat("-n ", h.name, " addr add ", h.address, "/24 dev ", h.interface),
          absl::StrCat("-n ", h.name, " link set ", h.interface, " up"),
          absl::StrCat("-n ", h.name, " link set lo up")}) {
      if (absl::Status s = Ip(args); !s.ok()) return s;
    }
  }
  return t;
}

NetnsTopology::~NetnsTopology() {
  for (const NetnsHost& h : hosts_) {
    std::error_code ignored;
    std::filesystem::remove_all(std::filesystem::path("/etc/netns") / h.name, ignored);
    Ip(absl::StrCat("netns del ", h.name)).IgnoreError();
  }
  if (!bridge_.empty()) Ip(absl::StrCat("link del ", bridge_)).IgnoreError();
}

std::vector<std::string> NetnsTopology::ExecPrefix(size_t i) const {
  return {"netns", "exec", hosts_[i].name};
}

absl::Status NetnsTopology::SetHosts(
    size_t i, const std::vector<std::pair<std::string, std::string>>& entries) {
  const std::filesystem::path dir = std::filesystem::path("/etc/netns") / hosts_[i].name;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    return absl::FailedPreconditionError(absl::StrCat(dir.string(), ": ", error.message()));
  std::ofstream out(dir / "hosts");
  out << "127.0.0.1 localhost\n";
  for (const auto& [address, name] : entries) out << address << " " << name << "\n";
  out.close();
  if (!out) return absl::FailedPreconditionError(absl::StrCat("cannot write ", dir.string()));
  return absl::OkStatus();
}

absl::Status NetnsTopology::SetConnected(size_t i, bool connected) {
  return Ip(absl::StrCat("-n ", hosts_[i].name, " link set ", hosts_[i].interface,
                         connected ? " up" : " down"));
}

}  // namespace pdserve::testing
