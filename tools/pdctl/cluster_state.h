// What `pdctl up` leaves for later commands: the processes it started (name, role, pid,
// addresses, log, the flags to start each again) and its supervisor, if any, in
// <run_dir>/cluster.json.
// Thread-safety: a value type.
#ifndef PDSERVE_TOOLS_PDCTL_CLUSTER_STATE_H_
#define PDSERVE_TOOLS_PDCTL_CLUSTER_STATE_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pdserve::pdctl {

struct ProcessState {
  std::string name;
  std::string role;    // router, prefill, decode
  std::string binary;  // Base name, to recognise the pid later.
  pid_t pid = 0;
  std::string grpc;
  std::string metrics;
  std::string log;
  std::vector<std::string> args;  // Its flags (the serving-info path aside).
  std::vector<int> cpus;          // Its pinning and niceness, for a restart.
  int nice = 0;
  std::vector<std::string> exec_prefix;  // The command it runs under (ProcessSpec).
  int restarts = 0;                      // Times the supervisor started it again.
};

struct ClusterState {
  std::string router;    // The router's gRPC address.
  std::string registry;  // Its registry's (the router's own when it has no registry listener).
  std::string router_metrics;
  std::string router_http;              // The OpenAI-compatible HTTP API; empty when off.
  std::vector<ProcessState> processes;  // Router first.
  pid_t supervisor_pid = 0;             // `pdctl supervise` (up --supervise); 0: none.

  // Where the registry is: `registry`, else `router` (state files written before it existed).
  const std::string& registry_address() const { return registry.empty() ? router : registry; }

  static std::string PathIn(const std::string& run_dir) { return run_dir + "/cluster.json"; }
  absl::Status Write(const std::string& path) const;
  static absl::StatusOr<ClusterState> Read(const std::string& path);
};

// Whether `pid` is alive and runs `binary` (a pid reused by another program does not count).
bool ProcessRuns(pid_t pid, const std::string& binary);

}  // namespace pdserve::pdctl

#endif  // PDSERVE_TOOLS_PDCTL_CLUSTER_STATE_H_
