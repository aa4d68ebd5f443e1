// Network namespaces standing in for hosts, for multi-host tests on one machine: each "host"
// is a namespace with one veth interface on a bridge in the test's own namespace, which also
// gets an address there so that the test can reach every host. Needs CAP_NET_ADMIN (root);
// Create() fails otherwise and the test skips. Everything is removed with the object.
// Thread-safety: one thread.
#ifndef PDSERVE_TESTS_TESTING_NETNS_TOPOLOGY_H_
#define PDSERVE_TESTS_TESTING_NETNS_TOPOLOGY_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace pdserve::testing {

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

 private:
  NetnsTopology() = default;
  std::string bridge_;
  std::vector<NetnsHost> hosts_;
};

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_TESTING_NETNS_TOPOLOGY_H_
