// Network namespaces standing in for hosts, for multi-host tests on one machine: each "host"
// is a namespace with one veth interface on a bridge in the test's own namespace, which also
// gets an address there so that the test can reach every host. Needs CAP_NET_ADMIN (root);
// Create() fails otherwise and the test skips. Everything is removed with the object.
// Link faults without sch_netem (our kernels lack it): loss is a cls_bpf program in
// direct-action mode that drops a random share of packets (its C source is here; it is
// compiled with `clang -target bpf` when first needed, never committed as a binary), rate
// limits are tbf, a partition is the link down; loss and rates apply to either direction of
// a host's link, or both.
// Thread-safety: one thread.
#ifndef PDSERVE_TOOLS_TESTBED_NETNS_TOPOLOGY_H_
#define PDSERVE_TOOLS_TESTBED_NETNS_TOPOLOGY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace pdserve::testbed {

// Which way a link fault applies, seen from the host.
enum class LinkDirection { kFromHost, kToHost, kBoth };

struct NetnsHost {
  std::string name;       // Namespace name.
  std::string address;    // Its IPv4 address on the bridge.
  std::string interface;  // Its interface name inside the namespace.
};

class NetnsTopology {
 public:
  // Hosts named `names` (suffixed to be unique) on one /24 bridge.
  static absl::StatusOr<std::unique_ptr<NetnsTopology>> Create(
      const std::vector<std::string>& names);
  ~NetnsTopology();

  const NetnsHost& host(size_t i) const { return hosts_[i]; }
  // The command-line prefix that runs a program on host `i` ({"ip","netns","exec",ns}).
  std::vector<std::string> ExecPrefix(size_t i) const;
  // Cuts host `i` off the network (its link down) or reconnects it.
  absl::Status SetConnected(size_t i, bool connected);
  // Gives host `i` its own /etc/hosts (`ip netns exec` mounts /etc/netns/<ns>/hosts over
  // /etc/hosts), with `entries` (address, name) and localhost: name resolution as a cluster's
  // DNS would answer, e.g. one name for several routers.
  absl::Status SetHosts(size_t i, const std::vector<std::pair<std::string, std::string>>& entries);
  // Drops `percent` (0-100) of host `i`'s packets going `direction`; 0 removes the loss.
  // FAILED_PRECONDITION when clang cannot build for BPF or tc cannot load the program.
  absl::Status SetLoss(size_t i, double percent, LinkDirection direction);
  // Limits host `i`'s link to `mbit` megabits per second going `direction` (tbf: packets over
  // the rate queue, up to 100 ms, then drop); 0 removes the limit.
  absl::Status SetRate(size_t i, double mbit, LinkDirection direction);
  // Packets the faults on host `i`'s link have dropped going `direction` so far (loss and
  // rate limits together; -1 if unreadable): proof that a fault acted.
  int64_t DroppedPackets(size_t i, LinkDirection direction) const;

 private:
  NetnsTopology() = default;
  // The tc command prefix and interface carrying host `i`'s packets one way: its own
  // interface (from the host) or its veth peer on the bridge side (to the host).
  std::pair<std::string, std::string> Egress(size_t i, bool from_host) const;
  absl::StatusOr<std::string> LossProgram(double percent);
  std::string bridge_;
  std::vector<NetnsHost> hosts_;
  std::vector<std::string> outer_;   // Bridge-side veth of each host.
  std::string scratch_;              // Compiled loss programs; removed with the object.
  std::vector<std::string> clsact_;  // Interfaces (prefix + name) given a clsact qdisc.
};

}  // namespace pdserve::testbed

#endif  // PDSERVE_TOOLS_TESTBED_NETNS_TOPOLOGY_H_
