#include "bench/chaos/namespace_hosts.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::bench {

using testbed::IssuedCert;
using testbed::NetnsHost;
using testbed::NetnsTopology;
using testbed::ThrowawayPki;
using testbed::TlsFlags;
namespace {

constexpr char kWorkerIdUriPrefix[] = "spiffe://pdserve/worker/";

}  // namespace

absl::StatusOr<NamespaceHosts> PlaceOnNamespaces(pdctl::ClusterConfig& c) {
  std::vector<pdctl::ProcessSpec*> specs = {&c.router};
  for (pdctl::ProcessSpec& p : c.prefill) specs.push_back(&p);
  for (pdctl::ProcessSpec& p : c.decode) specs.push_back(&p);
  NamespaceHosts hosts;
  for (const pdctl::ProcessSpec* p : specs) hosts.process.push_back(p->name);
  auto net = NetnsTopology::Create(hosts.process);
  if (!net.ok()) {
    return absl::UnimplementedError(absl::StrCat(
        "this machine cannot make network namespaces (needs root): ", net.status().message()));
  }
  hosts.net = *std::move(net);
  ASSIGN_OR_RETURN(hosts.pki, ThrowawayPki::Create("pdserve-chaos-ca"));
  ASSIGN_OR_RETURN(IssuedCert client, hosts.pki->Issue("chaos-client", "chaos-client", {}));
  ASSIGN_OR_RETURN(c.security, GrpcSecurity::FromConfig(hosts.pki->Config(client)));

  for (size_t i = 0; i < specs.size(); ++i) {
    pdctl::ProcessSpec& p = *specs[i];
    const NetnsHost& host = hosts.net->host(i);
    // A worker's certificate names its id (the router's --worker_id_uri_prefix): a restarted
    // worker proves it is the one it claims to be.
    std::vector<std::string> sans = {"IP:" + host.address};
    if (i > 0) sans.push_back(absl::StrCat("URI:", kWorkerIdUriPrefix, p.name));
    ASSIGN_OR_RETURN(IssuedCert cert, hosts.pki->Issue(p.name, p.name, sans));
    p.exec_prefix = {"/usr/sbin/ip"};
    for (const std::string& part : hosts.net->ExecPrefix(i)) p.exec_prefix.push_back(part);
    std::erase_if(p.flags, [](const std::string& flag) {
      return absl::StartsWith(flag, "--ucx_net_devices=");
    });
    for (const std::string& flag : TlsFlags(hosts.pki->Config(cert, /*require_client_cert=*/true)))
      p.flags.push_back(flag);
    const std::string any_port = host.address + ":0";
    if (i == 0) {  // The router: its listeners come from the config.
      p.flags.push_back(absl::StrCat("--worker_id_uri_prefix=", kWorkerIdUriPrefix));
      c.router_listen = any_port;
      c.router_registry_listen = any_port;
      c.router_metrics_listen = any_port;
      continue;
    }
    for (const std::string& flag : {"--listen=" + any_port, "--metrics_listen=" + any_port,
                                    "--ucx_net_devices=" + host.interface}) {
      p.flags.push_back(flag);
    }
  }
  return hosts;
}

}  // namespace pdserve::bench
