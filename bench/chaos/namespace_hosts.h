// Where `pdserve-bench chaos --netns` runs its cluster: each process on a host of its own (a
// network namespace on a bridge, tests' NetnsTopology), UCX over TCP on that host's interface,
// every gRPC listener mutual TLS with certificates from a throw-away CA (each host's names its
// address, a worker's also its id, which the router requires: --worker_id_uri_prefix), the
// harness and its clients holding a client certificate. The link faults of a
// cluster across hosts then apply per host: partitions, loss and rate limits.
// Needs CAP_NET_ADMIN (root), clang (loss programs) and openssl (certificates).
// Thread-safety: one thread.
#ifndef PDSERVE_BENCH_CHAOS_NAMESPACE_HOSTS_H_
#define PDSERVE_BENCH_CHAOS_NAMESPACE_HOSTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/grpc_security.h"
#include "tools/pdctl/cluster_config.h"
#include "tools/testbed/netns_topology.h"
#include "tools/testbed/throwaway_pki.h"

namespace pdserve::bench {

struct NamespaceHosts {
  std::unique_ptr<testbed::ThrowawayPki> pki;
  std::unique_ptr<testbed::NetnsTopology> net;
  std::vector<std::string> process;  // Host i runs the process named process[i].
};

// Gives the router and every worker of `config` a host: its exec prefix, its listeners on the
// host's address, its UCX device and its TLS flags (replacing any --ucx_net_devices), and
// `config.security` the client certificate. UNIMPLEMENTED when this machine cannot make
// network namespaces (not root); another error when a certificate cannot be made.
absl::StatusOr<NamespaceHosts> PlaceOnNamespaces(pdctl::ClusterConfig& config);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_CHAOS_NAMESPACE_HOSTS_H_
