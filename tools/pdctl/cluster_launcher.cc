#include "tools/pdctl/cluster_launcher.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pdserve/v1/registry.grpc.pb.h"
#include "tools/client/generation_client.h"
#include "tools/make_model/model_maker.h"

namespace pdserve::pdctl {
namespace {

struct Started {
  std::unique_ptr<ChildProcess> child;
  ProcessState state;
};

absl::StatusOr<Started> StartProcess(const ClusterConfig& c, const ProcessSpec& spec,
                                     const std::string& role, const std::string& binary,
                                     std::vector<std::string> args, bool detached) {
  for (const std::string& f : spec.flags) args.push_back(f);
  Started out;
  out.state.name = spec.name;
  out.state.role = role;
  out.state.binary = binary;
  out.state.args = std::move(args);
  out.state.cpus = spec.cpus;
  out.state.nice = spec.nice;
  out.state.exec_prefix = spec.exec_prefix;
  auto child = ChildProcess::Start(
      ProcessChildOptions(out.state, c.run_dir, detached, c.startup_timeout, c.security));
  if (!child.ok())
    return absl::UnavailableError(absl::StrCat(spec.name, ": ", child.status().message()));
  if (absl::Status s = (*child)->WaitHealthy(c.startup_timeout); !s.ok()) {
    return absl::UnavailableError(absl::StrCat(spec.name, " did not become healthy: ", s.message(),
                                               "\nlog (", (*child)->log_path(), "):\n",
                                               (*child)->Log()));
  }
  out.state.pid = (*child)->pid();
  out.state.grpc = (*child)->grpc_address();
  out.state.metrics = (*child)->metrics_address();
  out.state.log = (*child)->log_path();
  out.child = *std::move(child);
  return out;
}

absl::Status WaitForRegistrations(const std::string& router, size_t workers, absl::Duration timeout,
                                  const GrpcSecurity& security, ShutdownSignal* interrupt) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    auto status = FetchClusterStatus(router, 1, security);
    if (status.ok()) {
      size_t reported = 0;
      for (const v1::WorkerStatus& w : status->workers())
        reported += w.load().sequence() > 0 ? 1 : 0;
      if (reported == workers) return absl::OkStatus();
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "not every worker registered with the router within ", absl::FormatDuration(timeout)));
    }
    if (interrupt == nullptr) {
      absl::SleepFor(absl::Milliseconds(50));
    } else if (const int signal = interrupt->WaitUntil(absl::Now() + absl::Milliseconds(50));
               signal >= 0) {
      return absl::CancelledError(
          absl::StrCat("interrupted (signal ", signal, ") while the workers registered"));
    }
  }
}

}  // namespace

absl::StatusOr<v1::ClusterStatus> FetchClusterStatus(const std::string& router, int decisions,
                                                     const GrpcSecurity& security) {
  auto stub = v1::Registry::NewStub(client::MakeChannel(router, security));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::ClusterStatusRequest request;
  request.set_max_decisions(static_cast<uint32_t>(decisions));
  v1::ClusterStatus status;
  const grpc::Status s = stub->GetClusterStatus(&ctx, request, &status);
  if (!s.ok())
    return absl::UnavailableError(absl::StrCat("router ", router, ": ", s.error_message()));
  return status;
}

ChildOptions ProcessChildOptions(const ProcessState& p, const std::string& run_dir, bool detached,
                                 absl::Duration startup_timeout, const GrpcSecurity& security) {
  ChildOptions options;
  if (p.exec_prefix.empty()) {
    options.binary = p.binary;
    options.args = p.args;
  } else {
    options.binary = p.exec_prefix[0];
    options.args.assign(p.exec_prefix.begin() + 1, p.exec_prefix.end());
    options.args.push_back(BinaryPath(p.binary));
    options.args.insert(options.args.end(), p.args.begin(), p.args.end());
  }
  options.run_dir = run_dir;
  options.name = p.name;
  options.detached = detached;
  options.cpus = p.cpus;
  options.nice = p.nice;
  options.startup_timeout = startup_timeout;
  options.security = security;
  return options;
}

LaunchedCluster::~LaunchedCluster() {
  while (!children.empty()) children.pop_back();
}

void LaunchedCluster::Release() {
  for (auto& child : children) child->Release();
}

absl::Status EnsureClusterModel(const ClusterConfig& c, const std::string& config_name) {
  if (std::filesystem::exists(c.model_dir + "/config.json")) return absl::OkStatus();
  if (c.model_preset.empty()) {
    return absl::NotFoundError(
        absl::StrCat(config_name, ": model.dir: ", c.model_dir,
                     " has no config.json and no model.preset is given to make one"));
  }
  auto spec = tools::ModelSpec::Preset(c.model_preset);
  if (!spec.ok()) return spec.status();
  spec->weights = c.model_weights;
  if (c.model_max_position_embeddings > 0)
    spec->max_position_embeddings = c.model_max_position_embeddings;
  return tools::EnsureModel(*spec, c.model_dir);
}

// A fresh random registration token for this cluster, in the run directory (mode 0600): only
// processes that can read it (this user's) can register as workers with the router.
absl::StatusOr<std::string> WriteRegistrationToken(const std::string& run_dir) {
  std::error_code error;
  std::filesystem::create_directories(run_dir, error);
  std::ifstream random("/dev/urandom", std::ios::binary);
  unsigned char bytes[24];
  if (!random.read(reinterpret_cast<char*>(bytes), sizeof(bytes))) {
    return absl::InternalError("cannot read /dev/urandom for the registration token");
  }
  std::string token;
  for (unsigned char b : bytes) absl::StrAppend(&token, absl::Hex(b, absl::kZeroPad2));
  const std::string path = run_dir + "/registration-token";
  std::filesystem::remove(path, error);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", path));
  const bool written =
      ::write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  ::close(fd);
  if (!written) return absl::InternalError(absl::StrCat("cannot write ", path));
  return path;
}

absl::StatusOr<LaunchedCluster> LaunchCluster(const ClusterConfig& c, bool detached,
                                              const LaunchHooks& hooks) {
  LaunchedCluster cluster;
  auto token_file = WriteRegistrationToken(c.run_dir);
  if (!token_file.ok()) return token_file.status();
  const std::string token_flag = "--registration_token_file=" + *token_file;
  std::vector<std::string> router_args = {"--model=" + c.model_dir, "--listen=" + c.router_listen,
                                          "--metrics_listen=" + c.router_metrics_listen,
                                          "--policy=" + c.policy, token_flag};
  if (!c.cost_model.empty()) router_args.push_back("--cost_model=" + c.cost_model);
  if (!c.router_http_listen.empty()) router_args.push_back("--http_listen=" + c.router_http_listen);
  if (!c.router_registry_listen.empty())
    router_args.push_back("--registry_listen=" + c.router_registry_listen);
  auto add = [&](absl::StatusOr<Started> s) -> absl::Status {
    if (!s.ok()) return s.status();  // Processes already started stop with their handles.
    cluster.state.processes.push_back(s->state);
    cluster.children.push_back(std::move(s->child));
    if (hooks.on_progress) hooks.on_progress(cluster.state);
    return absl::OkStatus();
  };
  if (absl::Status s =
          add(StartProcess(c, c.router, "router", "pdserve-router", router_args, detached));
      !s.ok()) {
    return s;
  }
  cluster.state.router = cluster.state.processes[0].grpc;
  cluster.state.router_metrics = cluster.state.processes[0].metrics;
  cluster.state.registry = cluster.children[0]->internal_grpc_address();
  cluster.state.router_http = cluster.children[0]->serving_info().count("http")
                                  ? cluster.children[0]->serving_info().at("http")
                                  : "";
  auto worker_args = [&](const ProcessSpec& p) {
    return std::vector<std::string>{"--model=" + c.model_dir,
                                    "--router=" + cluster.state.registry_address(),
                                    "--worker_id=" + p.name,
                                    absl::StrCat("--threads=", p.threads),
                                    "--ucx_transports=" + c.ucx_transports,
                                    token_flag};
  };
  for (const ProcessSpec& p : c.prefill) {
    if (absl::Status s =
            add(StartProcess(c, p, "prefill", "pdserve-prefill", worker_args(p), detached));
        !s.ok()) {
      return s;
    }
  }
  for (const ProcessSpec& p : c.decode) {
    if (absl::Status s =
            add(StartProcess(c, p, "decode", "pdserve-decode", worker_args(p), detached));
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s =
          WaitForRegistrations(cluster.state.registry_address(), c.prefill.size() + c.decode.size(),
                               c.startup_timeout, c.security, hooks.interrupt);
      !s.ok()) {
    return s;
  }
  return cluster;
}

}  // namespace pdserve::pdctl
