#include "tools/testbed/netns_topology.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace pdserve::testbed {
namespace {

absl::Status Run(const std::string& tool, const std::string& args) {
  const std::string command = absl::StrCat(tool, " ", args, " >/dev/null 2>&1");
  if (std::system(command.c_str()) == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("`", tool, " ", args, "` failed"));
}

absl::Status Ip(const std::string& args) { return Run("ip", args); }

// The loss program: TC_ACT_SHOT (2) for a packet whose random draw is below the threshold,
// TC_ACT_UNSPEC (-1: the packet goes on) otherwise. Helper 7 is bpf_get_prandom_u32.
constexpr char kLossProgram[] = R"(
#define SEC(name) __attribute__((section(name), used))
static unsigned int (*get_prandom_u32)(void) = (void *)7;
SEC("classifier") int drop_some(void *skb) {
  (void)skb;
  return get_prandom_u32() < (unsigned int)LOSS_THRESHOLD ? 2 : -1;
}
char _license[] SEC("license") = "GPL";
)";

}  // namespace

absl::StatusOr<std::unique_ptr<NetnsTopology>> NetnsTopology::Create(
    const std::vector<std::string>& names) {
  std::unique_ptr<NetnsTopology> t(new NetnsTopology());
  // Unique per topology: a namespace's veth may outlive its deletion for a moment (the
  // kernel removes it asynchronously), so a second topology in the same process gets names of
  // its own.
  static std::atomic<int> created{0};
  const int n = created++;
  const std::string id = absl::StrCat(getpid() % 100000, "x", n % 100);
  const int subnet = 16 + (getpid() + n) % 200;  // 10.<subnet>.7.0/24, unlikely to be in use.
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
    t->outer_.push_back(outer);
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
  if (!scratch_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(scratch_, ignored);
  }
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

std::pair<std::string, std::string> NetnsTopology::Egress(size_t i, bool from_host) const {
  if (from_host) return {absl::StrCat("-n ", hosts_[i].name), hosts_[i].interface};
  return {"", outer_[i]};
}

absl::StatusOr<std::string> NetnsTopology::LossProgram(double percent) {
  if (scratch_.empty()) {
    char dir[] = "/tmp/pdserve-netns-XXXXXX";
    if (mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp failed");
    scratch_ = dir;
    std::ofstream(scratch_ + "/loss.c") << kLossProgram;
  }
  const auto threshold = static_cast<uint64_t>(percent / 100 * 4294967296.0);
  const std::string object = absl::StrCat(scratch_, "/loss-", threshold, ".o");
  if (!std::filesystem::exists(object)) {
    if (absl::Status s = Run("clang", absl::StrCat("-O2 -target bpf -DLOSS_THRESHOLD=", threshold,
                                                   "u -c ", scratch_, "/loss.c -o ", object));
        !s.ok()) {
      return s;
    }
  }
  return object;
}

absl::Status NetnsTopology::SetLoss(size_t i, double percent, LinkDirection direction) {
  if (!(percent >= 0 && percent <= 100))
    return absl::InvalidArgumentError(absl::StrCat("loss: ", percent, " is not a percentage"));
  std::string object;
  if (percent > 0) {
    // 100 % must drop everything: the draw is below 2^32 always, the threshold at most that.
    absl::StatusOr<std::string> built = LossProgram(std::min(percent, 99.9999999));
    if (!built.ok()) return built.status();
    object = *built;
  }
  for (const bool from_host : {true, false}) {
    if (direction != LinkDirection::kBoth && from_host != (direction == LinkDirection::kFromHost))
      continue;
    const auto [where, device] = Egress(i, from_host);
    const std::string key = absl::StrCat(where, " ", device);
    if (percent == 0) {
      Run("tc", absl::StrCat(where, " filter del dev ", device, " egress prio 1")).IgnoreError();
      continue;
    }
    if (std::find(clsact_.begin(), clsact_.end(), key) == clsact_.end()) {
      if (absl::Status s = Run("tc", absl::StrCat(where, " qdisc add dev ", device, " clsact"));
          !s.ok()) {
        return s;
      }
      clsact_.push_back(key);
    }
    if (absl::Status s = Run(
            "tc", absl::StrCat(where, " filter replace dev ", device,
                               " egress prio 1 handle 1 bpf da obj ", object, " sec classifier"));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status NetnsTopology::SetRate(size_t i, double mbit, LinkDirection direction) {
  if (!(mbit >= 0)) return absl::InvalidArgumentError(absl::StrCat("rate: ", mbit, " Mbit/s"));
  for (const bool from_host : {true, false}) {
    if (direction != LinkDirection::kBoth && from_host != (direction == LinkDirection::kFromHost))
      continue;
    const auto [where, device] = Egress(i, from_host);
    if (mbit == 0) {
      Run("tc", absl::StrCat(where, " qdisc del dev ", device, " root")).IgnoreError();
      continue;
    }
    // A burst of at least one full-size packet per tick; 100 ms of queue at the rate.
    if (absl::Status s =
            Run("tc", absl::StrCat(where, " qdisc replace dev ", device, " root tbf rate ", mbit,
                                   "mbit burst 32kb latency 100ms"));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

int64_t NetnsTopology::DroppedPackets(size_t i, LinkDirection direction) const {
  int64_t total = 0;
  for (const bool from_host : {true, false}) {
    if (direction != LinkDirection::kBoth && from_host != (direction == LinkDirection::kFromHost))
      continue;
    const auto [where, device] = Egress(i, from_host);
    const std::string command = absl::StrCat("tc ", where, " -s qdisc show dev ", device);
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return -1;
    std::string text;
    char buffer[512];
    while (fgets(buffer, sizeof(buffer), pipe) != nullptr) text += buffer;
    if (pclose(pipe) != 0) return -1;
    // Every qdisc's "(dropped N," counts: clsact's (the loss program) and tbf's.
    for (size_t at = text.find("(dropped "); at != std::string::npos;
         at = text.find("(dropped ", at + 1)) {
      total += std::strtoll(text.c_str() + at + 9, nullptr, 10);
    }
  }
  return total;
}

}  // namespace pdserve::testbed
