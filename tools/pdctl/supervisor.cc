#include "tools/pdctl/supervisor.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "server/child_process.h"
#include "tools/pdctl/cluster_launcher.h"

namespace pdserve::pdctl {

absl::Status SupervisionPolicy::Validate() const {
  if (poll <= absl::ZeroDuration()) return absl::InvalidArgumentError("poll: must be positive");
  if (backoff_initial <= absl::ZeroDuration() || backoff_max < backoff_initial) {
    return absl::InvalidArgumentError(
        "--restart_backoff and --restart_backoff_max: need 0 < backoff <= backoff_max");
  }
  if (max_restarts < 0 || max_restarts > 1000)
    return absl::InvalidArgumentError("--max_restarts: must be in [0, 1000]");
  if (window <= absl::ZeroDuration())
    return absl::InvalidArgumentError("--restart_window: must be positive");
  if (startup_timeout <= absl::ZeroDuration())
    return absl::InvalidArgumentError("startup timeout: must be positive");
  return absl::OkStatus();
}

std::vector<std::string> SupervisionPolicy::AsFlags() const {
  return {absl::StrCat("--restart_backoff=", absl::FormatDuration(backoff_initial)),
          absl::StrCat("--restart_backoff_max=", absl::FormatDuration(backoff_max)),
          absl::StrCat("--max_restarts=", max_restarts),
          absl::StrCat("--restart_window=", absl::FormatDuration(window)),
          absl::StrCat("--restart_startup_timeout=", absl::FormatDuration(startup_timeout))};
}

int RestartBudget::attempts_in_window(absl::Time now) {
  while (!attempts_.empty() && now - attempts_.front() >= policy_.window) attempts_.pop_front();
  return static_cast<int>(attempts_.size());
}

std::optional<absl::Time> RestartBudget::NextAttempt(absl::Time now) {
  const int recent = attempts_in_window(now);
  if (recent >= policy_.max_restarts) return std::nullopt;
  absl::Duration wait = policy_.backoff_initial;
  for (int i = 0; i < recent && wait < policy_.backoff_max; ++i) wait *= 2;
  return now + std::min(wait, policy_.backoff_max);
}

std::string EventsPathIn(const std::string& run_dir) { return run_dir + "/events.jsonl"; }

absl::Status AppendEvent(const std::string& run_dir, const SupervisionEvent& e) {
  const std::string path = EventsPathIn(run_dir);
  std::ofstream out(path, std::ios::app);
  nlohmann::json j = {{"time", absl::FormatTime(absl::RFC3339_full, e.time, absl::UTCTimeZone())},
                      {"process", e.process},
                      {"event", e.event},
                      {"detail", e.detail}};
  out << j.dump() << "\n";
  if (!out) return absl::InternalError(absl::StrCat("cannot append to ", path));
  return absl::OkStatus();
}

std::vector<SupervisionEvent> ReadEvents(const std::string& run_dir, size_t last) {
  std::vector<SupervisionEvent> events;
  std::ifstream in(EventsPathIn(run_dir));
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;  // A line cut by a crash.
    SupervisionEvent e;
    std::string error;
    if (!absl::ParseTime(absl::RFC3339_full, j.value("time", ""), &e.time, &error)) continue;
    e.process = j.value("process", "");
    e.event = j.value("event", "");
    e.detail = j.value("detail", "");
    events.push_back(std::move(e));
  }
  if (last > 0 && events.size() > last) events.erase(events.begin(), events.end() - last);
  return events;
}

std::vector<std::string> RouterRestartArgs(const ClusterState& state, const ProcessState& router) {
  std::vector<std::string> args = router.args;
  // The addresses it had (a configured port 0 became a real one): its workers and clients
  // were given those.
  const std::pair<std::string, std::string> bound[] = {{"--listen=", router.grpc},
                                                       {"--metrics_listen=", router.metrics},
                                                       {"--registry_listen=", state.registry},
                                                       {"--http_listen=", state.router_http}};
  for (std::string& arg : args) {
    for (const auto& [flag, address] : bound) {
      if (!address.empty() && absl::StartsWith(arg, flag)) arg = flag + address;
    }
  }
  return args;
}

Supervisor::Supervisor(std::string run_dir, SupervisionPolicy policy, GrpcSecurity security)
    : run_dir_(std::move(run_dir)), policy_(policy), security_(std::move(security)) {}

void Supervisor::Event(const std::string& process, const std::string& event,
                       const std::string& detail) {
  PDS_LOG(INFO) << process << ": " << event << (detail.empty() ? "" : ": ") << detail;
  if (absl::Status s = AppendEvent(run_dir_, {absl::Now(), process, event, detail}); !s.ok())
    PDS_LOG(WARNING) << s;
}

void Supervisor::Reap(const ClusterState& state) {
  // Only the cluster's processes: waiting for any child would also take the exit status of
  // children that are not ours to reap (a program running the supervisor in-process, such as
  // pdserve-bench chaos, runs tc and clang with std::system, which then fails with ECHILD).
  // A pid stays listed until reaped, even once a restart replaced it in `state`.
  for (const ProcessState& p : state.processes) {
    if (p.pid > 0) unreaped_.insert(p.pid);
  }
  for (auto it = unreaped_.begin(); it != unreaped_.end();) {
    int status = 0;
    const pid_t reaped = waitpid(*it, &status, WNOHANG);
    if (reaped == *it) exit_statuses_[*it] = status;
    // Reaped now, or not our child (started by an earlier pdctl): nothing more to wait for.
    it = reaped == 0 ? std::next(it) : unreaped_.erase(it);
  }
}

namespace {

std::string DescribeExit(std::optional<int> status) {
  if (!status.has_value()) return "exited (not started by the supervisor: status unknown)";
  if (WIFSIGNALED(*status)) return absl::StrCat("killed by signal ", WTERMSIG(*status));
  if (WIFEXITED(*status)) return absl::StrCat("exited with status ", WEXITSTATUS(*status));
  return "exited";
}

}  // namespace

void Supervisor::Check(ClusterState& state, size_t index, absl::Time now) {
  ProcessState& p = state.processes[index];
  if (ProcessRuns(p.pid, p.binary) || gave_up_[p.name]) return;
  RestartBudget& budget = budgets_.try_emplace(p.name, policy_).first->second;
  auto waiting = next_attempt_.find(p.name);
  if (waiting == next_attempt_.end()) {
    auto status = exit_statuses_.find(p.pid);
    Event(p.name, "exited",
          absl::StrCat(
              "pid ", p.pid, " ",
              DescribeExit(status == exit_statuses_.end() ? std::nullopt
                                                          : std::optional<int>(status->second))));
    if (!ScheduleAttempt(p.name, budget, now)) return;
    waiting = next_attempt_.find(p.name);
  }
  if (now < waiting->second) return;
  next_attempt_.erase(waiting);
  budget.Attempted(now);
  absl::Status restarted = Restart(state, index);
  if (restarted.ok()) {
    Event(p.name, "restarted",
          absl::StrCat("pid ", p.pid, ", restart ", p.restarts, " (",
                       budget.attempts_in_window(now), " of ", policy_.max_restarts, " within ",
                       absl::FormatDuration(policy_.window), ")"));
    return;
  }
  Event(p.name, "restart_failed", std::string(restarted.message()));
  ScheduleAttempt(p.name, budget, absl::Now());
}

bool Supervisor::ScheduleAttempt(const std::string& name, RestartBudget& budget, absl::Time now) {
  const std::optional<absl::Time> next = budget.NextAttempt(now);
  if (!next.has_value()) {
    gave_up_[name] = true;
    Event(name, "gave_up",
          absl::StrCat(policy_.max_restarts, " restarts within ",
                       absl::FormatDuration(policy_.window), " already; left down"));
    return false;
  }
  next_attempt_[name] = *next;
  return true;
}

absl::Status Supervisor::Restart(ClusterState& state, size_t index) {
  ProcessState& p = state.processes[index];
  const bool router = p.role == "router";
  // The old log stays beside the new one: it says why the process died.
  std::error_code ignored;
  if (!p.log.empty()) std::filesystem::rename(p.log, absl::StrCat(p.log, ".", p.restarts), ignored);
  ProcessState restarting = p;
  if (router) restarting.args = RouterRestartArgs(state, p);
  auto child = ChildProcess::Start(ProcessChildOptions(restarting, run_dir_, /*detached=*/true,
                                                       policy_.startup_timeout, security_));
  if (!child.ok()) return child.status();
  // Listed before the health check: a `pdctl down` meanwhile (which stops this supervisor
  // first) finds and stops it.
  p.pid = (*child)->pid();
  ++p.restarts;
  if (absl::Status s = state.Write(ClusterState::PathIn(run_dir_)); !s.ok()) return s;
  if (absl::Status s = (*child)->WaitHealthy(policy_.startup_timeout); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("not healthy within ",
                                               absl::FormatDuration(policy_.startup_timeout), ": ",
                                               s.message(), " (log: ", (*child)->log_path(), ")"));
  }
  p.grpc = (*child)->grpc_address();
  p.metrics = (*child)->metrics_address();
  p.log = (*child)->log_path();
  (*child)->Release();  // Reaped by Reap().
  return state.Write(ClusterState::PathIn(run_dir_));
}

absl::Status Supervisor::Run(ShutdownSignal& stop) {
  RETURN_IF_ERROR(policy_.Validate());
  const std::string path = ClusterState::PathIn(run_dir_);
  auto state = ClusterState::Read(path);
  if (!state.ok()) return state.status();
  // This copy is what every restart writes back. `pdctl up` records the supervisor's pid only
  // after starting it, so the file read here may not hold it yet; written back without it,
  // `pdctl status` would lose the supervisor and `pdctl down` would not stop it first.
  state->supervisor_pid = getpid();
  Event("supervisor", "supervising",
        absl::StrCat(state->processes.size(), " processes; at most ", policy_.max_restarts,
                     " restarts each within ", absl::FormatDuration(policy_.window)));
  while (stop.WaitUntil(absl::Now() + policy_.poll) < 0) {
    Reap(*state);
    if (!std::filesystem::exists(path)) break;  // Brought down without us.
    for (size_t i = 0; i < state->processes.size() && !stop.triggered(); ++i)
      Check(*state, i, absl::Now());
  }
  Event("supervisor", "stopped", "");
  return absl::OkStatus();
}

}  // namespace pdserve::pdctl
