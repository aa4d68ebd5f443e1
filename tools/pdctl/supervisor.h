// Supervision of a local cluster (`pdctl up --supervise`): a detached `pdctl supervise`
// process watches the processes listed in <run_dir>/cluster.json and starts again one that
// has exited (a crash, a kill), with the flags it was started with; a router comes back at
// the addresses it had, so that its workers, which register again by themselves, and its
// clients find it. Restarts back off (doubling from `backoff_initial` to `backoff_max` while
// a process keeps failing) and are budgeted (`max_restarts` within `window`; past it the
// process is left down, and says so). Every exit, restart, failed restart and surrender is an
// event in <run_dir>/events.jsonl, which `pdctl status` shows. `pdctl down` stops the
// supervisor before the processes.
// Thread-safety: RestartBudget is a value; Supervisor runs on one thread.
#ifndef PDSERVE_TOOLS_PDCTL_SUPERVISOR_H_
#define PDSERVE_TOOLS_PDCTL_SUPERVISOR_H_

#include <sys/types.h>

#include <deque>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/shutdown_signal.h"
#include "server/grpc_security.h"
#include "tools/pdctl/cluster_state.h"

namespace pdserve::pdctl {

struct SupervisionPolicy {
  // How often the processes are checked. Default 250 ms.
  absl::Duration poll = absl::Milliseconds(250);
  // The wait before the first restart after an exit; doubled for each further restart within
  // `window`, up to `backoff_max`. Defaults 1 s and 30 s.
  absl::Duration backoff_initial = absl::Seconds(1);
  absl::Duration backoff_max = absl::Seconds(30);
  // Restarts (attempts, failed ones included) one process may have within `window`; past
  // that it stays down. Defaults 5 and 10 minutes.
  int max_restarts = 5;
  absl::Duration window = absl::Minutes(10);
  // How long a restarted process has to answer its health check. Default 60 s.
  absl::Duration startup_timeout = absl::Seconds(60);
  absl::Status Validate() const;
  // As `pdctl supervise` flags (what `up --supervise` passes on).
  std::vector<std::string> AsFlags() const;
};

// When a process that exited may be started again.
class RestartBudget {
 public:
  explicit RestartBudget(const SupervisionPolicy& policy) : policy_(policy) {}
  // The time of the next attempt for an exit at `now`; nullopt when the budget is spent.
  std::optional<absl::Time> NextAttempt(absl::Time now);
  void Attempted(absl::Time now) { attempts_.push_back(now); }
  int attempts_in_window(absl::Time now);

 private:
  SupervisionPolicy policy_;
  std::deque<absl::Time> attempts_;
};

struct SupervisionEvent {
  absl::Time time;
  std::string process;
  std::string event;  // exited, restarted, restart_failed, gave_up, supervising, stopped
  std::string detail;
};
std::string EventsPathIn(const std::string& run_dir);
absl::Status AppendEvent(const std::string& run_dir, const SupervisionEvent& event);
// The last `last` events (all with 0), oldest first; empty when there is no events file.
std::vector<SupervisionEvent> ReadEvents(const std::string& run_dir, size_t last);

// The flags a router restarts with: its listen flags replaced by the addresses it had.
std::vector<std::string> RouterRestartArgs(const ClusterState& state, const ProcessState& router);

class Supervisor {
 public:
  // `security`: how to reach the processes it restarts (TLS when they serve TLS).
  Supervisor(std::string run_dir, SupervisionPolicy policy, GrpcSecurity security = {});
  // Watches until `stop` fires or the cluster is gone (cluster.json removed). An error when
  // there is no cluster to watch.
  absl::Status Run(ShutdownSignal& stop);

 private:
  // Collects the exit status of those of `state`'s processes that are its children and exited.
  void Reap(const ClusterState& state);
  void Check(ClusterState& state, size_t index, absl::Time now);
  absl::Status Restart(ClusterState& state, size_t index);
  // The next restart of `name` under its budget; false (and the process given up, said in an
  // event) when the budget is spent.
  bool ScheduleAttempt(const std::string& name, RestartBudget& budget, absl::Time now);
  void Event(const std::string& process, const std::string& event, const std::string& detail);

  std::string run_dir_;
  SupervisionPolicy policy_;
  GrpcSecurity security_;
  absl::flat_hash_map<std::string, RestartBudget> budgets_;
  absl::flat_hash_map<std::string, absl::Time> next_attempt_;  // Down, waiting to restart.
  absl::flat_hash_map<std::string, bool> gave_up_;
  absl::flat_hash_map<pid_t, int> exit_statuses_;  // Of the processes it started and reaped.
  std::set<pid_t> unreaped_;                       // The cluster's pids, until reaped.
};

}  // namespace pdserve::pdctl

#endif  // PDSERVE_TOOLS_PDCTL_SUPERVISOR_H_
