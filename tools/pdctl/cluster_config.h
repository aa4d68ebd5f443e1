// A local cluster's description (deploy/local/cluster.yaml): the model, the router and each
// worker process with its threads, CPU pinning and extra flags. Relative paths are taken from
// the directory pdctl runs in. Errors name the file and the key.
// Thread-safety: a value type.
#ifndef PDSERVE_TOOLS_PDCTL_CLUSTER_CONFIG_H_
#define PDSERVE_TOOLS_PDCTL_CLUSTER_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/grpc_security.h"

namespace pdserve::pdctl {

struct ProcessSpec {
  std::string name;
  int threads = 1;                 // Forward threads (workers).
  std::vector<int> cpus;           // Pinning; empty: none.
  int nice = 0;                    // Niceness 0..19 (see ChildOptions::nice).
  std::vector<std::string> flags;  // Extra command-line flags, passed as given.
  // A command the process runs under, its binary's path and flags following: e.g.
  // {"ip", "netns", "exec", "host-1"} (another network namespace) or {"numactl",
  // "--membind=0"}. It must exec the binary in its own process (the pid is the binary's).
  std::vector<std::string> exec_prefix;
};

struct ClusterConfig {
  std::string run_dir = ".pdserve/run";  // Logs, serving info, cluster.json.
  std::string model_dir = "models/tiny";
  std::string model_preset;  // Generate model_dir with this preset if it is empty.
  // With model_preset: false writes no weights (config and tokenizer only: a cluster of
  // --backend=emulated workers); a context length other than the preset's when > 0.
  bool model_weights = true;
  int model_max_position_embeddings = 0;
  std::string ucx_transports = "shm";
  std::string router_listen = "127.0.0.1:50051";
  std::string router_metrics_listen = "127.0.0.1:0";
  // The router's OpenAI-compatible HTTP API (--http_listen); empty: off.
  std::string router_http_listen;
  // The router's registry listener (--registry_listen); workers register there, pdctl status
  // reads there. Empty: the registry shares router_listen.
  std::string router_registry_listen;
  std::string policy = "cost_model";
  std::string cost_model;  // Path; empty: the router's built-in defaults.
  ProcessSpec router;
  std::vector<ProcessSpec> prefill;
  std::vector<ProcessSpec> decode;
  absl::Duration startup_timeout = absl::Seconds(120);
  // How the launcher reaches the processes (health, registrations): TLS when they serve TLS
  // (their --tls_* flags in each ProcessSpec's flags). Not read from YAML: set by programs
  // that launch a TLS cluster (pdserve-bench chaos --netns).
  GrpcSecurity security;
};

absl::StatusOr<ClusterConfig> ParseClusterConfig(const std::string& yaml_text,
                                                 const std::string& file_name);
absl::StatusOr<ClusterConfig> LoadClusterConfig(const std::string& path);

}  // namespace pdserve::pdctl

#endif  // PDSERVE_TOOLS_PDCTL_CLUSTER_CONFIG_H_
