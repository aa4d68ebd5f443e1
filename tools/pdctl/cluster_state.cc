#include "tools/pdctl/cluster_state.h"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace pdserve::pdctl {

absl::Status ClusterState::Write(const std::string& path) const {
  nlohmann::json j;
  j["router"] = router;
  j["registry"] = registry;
  j["router_metrics"] = router_metrics;
  j["router_http"] = router_http;
  j["supervisor_pid"] = supervisor_pid;
  j["processes"] = nlohmann::json::array();
  for (const ProcessState& p : processes) {
    j["processes"].push_back({{"name", p.name},
                              {"role", p.role},
                              {"binary", p.binary},
                              {"pid", p.pid},
                              {"grpc", p.grpc},
                              {"metrics", p.metrics},
                              {"log", p.log},
                              {"args", p.args},
                              {"cpus", p.cpus},
                              {"nice", p.nice},
                              {"exec_prefix", p.exec_prefix},
                              {"restarts", p.restarts}});
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
    out << j.dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) return absl::InternalError(absl::StrCat("cannot rename ", tmp, ": ", error.message()));
  return absl::OkStatus();
}

absl::StatusOr<ClusterState> ClusterState::Read(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat("no cluster is up (", path, " does not exist; run pdctl up)"));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("processes")) {
    return absl::DataLossError(absl::StrCat(path, ": not a pdctl cluster state file"));
  }
  ClusterState s;
  s.router = j.value("router", "");
  s.registry = j.value("registry", "");
  s.router_metrics = j.value("router_metrics", "");
  s.router_http = j.value("router_http", "");
  s.supervisor_pid = j.value("supervisor_pid", 0);
  for (const auto& p : j["processes"]) {
    ProcessState ps;
    ps.name = p.value("name", "");
    ps.role = p.value("role", "");
    ps.binary = p.value("binary", "");
    ps.pid = p.value("pid", 0);
    ps.grpc = p.value("grpc", "");
    ps.metrics = p.value("metrics", "");
    ps.log = p.value("log", "");
    ps.args = p.value("args", std::vector<std::string>{});
    ps.cpus = p.value("cpus", std::vector<int>{});
    ps.nice = p.value("nice", 0);
    ps.exec_prefix = p.value("exec_prefix", std::vector<std::string>{});
    ps.restarts = p.value("restarts", 0);
    s.processes.push_back(std::move(ps));
  }
  return s;
}

bool ProcessRuns(pid_t pid, const std::string& binary) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  std::ifstream cmdline(absl::StrCat("/proc/", pid, "/cmdline"));
  std::string argv0;
  std::getline(cmdline, argv0, '\0');
  if (!absl::EndsWith(argv0, binary)) return false;
  // A zombie (exited, not yet reaped by its parent) is not running.
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'Z';
}

}  // namespace pdserve::pdctl
