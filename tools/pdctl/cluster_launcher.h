// Starts the processes of a cluster described by a ClusterConfig: the router, then the
// prefill and decode workers registered with it, each healthy before the next starts, and
// returns once every worker has registered and reported. Used by `pdctl up` (detached
// processes that outlive it) and by benchmarks (children that stop with the handle).
// Thread-safety: use from one thread.
#ifndef PDSERVE_TOOLS_PDCTL_CLUSTER_LAUNCHER_H_
#define PDSERVE_TOOLS_PDCTL_CLUSTER_LAUNCHER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/shutdown_signal.h"
#include "pdserve/v1/registry.pb.h"
#include "server/child_process.h"
#include "server/grpc_security.h"
#include "tools/pdctl/cluster_config.h"
#include "tools/pdctl/cluster_state.h"

namespace pdserve::pdctl {

struct LaunchedCluster {
  LaunchedCluster() = default;
  LaunchedCluster(LaunchedCluster&&) = default;
  LaunchedCluster& operator=(LaunchedCluster&&) = default;
  // Stops the workers before the router (their requests drain through it).
  ~LaunchedCluster();

  std::vector<std::unique_ptr<ChildProcess>> children;  // Router first.
  ClusterState state;
  // Lets every process outlive this handle (pdctl up).
  void Release();
};

// The router's view of the cluster (Registry.GetClusterStatus), with `decisions` recent
// placement decisions.
absl::StatusOr<v1::ClusterStatus> FetchClusterStatus(const std::string& router, int decisions,
                                                     const GrpcSecurity& security);

// How to start `process` (from its state: binary, flags, pinning, the command it runs under)
// with its log and serving info in `run_dir`: one definition for the launcher and the
// supervisor's restarts.
ChildOptions ProcessChildOptions(const ProcessState& process, const std::string& run_dir,
                                 bool detached, absl::Duration startup_timeout,
                                 const GrpcSecurity& security);

// Makes the model if the config says how (model.preset) and it is missing.
absl::Status EnsureClusterModel(const ClusterConfig& config, const std::string& config_name);
struct LaunchHooks {
  // Called after each process is up, with what is running so far (pdctl up writes it to
  // cluster.json, so that `pdctl down` finds them even if pdctl itself is killed).
  std::function<void(const ClusterState&)> on_progress;
  // Checked while waiting for the workers to register: a SIGINT or SIGTERM ends the launch
  // (CANCELLED) and stops what was started. Null: not interruptible.
  ShutdownSignal* interrupt = nullptr;
};

// UNAVAILABLE with the failing process's log when one does not come up; processes already
// started are stopped.
absl::StatusOr<LaunchedCluster> LaunchCluster(const ClusterConfig& config, bool detached,
                                              const LaunchHooks& hooks = {});

}  // namespace pdserve::pdctl

#endif  // PDSERVE_TOOLS_PDCTL_CLUSTER_LAUNCHER_H_
