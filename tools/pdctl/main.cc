// pdctl: runs a pdserve cluster on this machine and talks to it.
//   pdctl up -f deploy/local/cluster.yaml   start the router and workers, wait until ready
//   pdctl status                            workers, load, KV usage, recent placements
//   pdctl generate --prompt="..."           stream a completion (stdout), then its placement
//                                           and timings (stderr)
//   pdctl up --supervise                    ... and start again what exits (backoff, budget)
//   pdctl down                              stop everything `up` started
//   pdctl health --address=H:P --service=S  exit 0 when S is SERVING (a probe; TLS flags apply)
//   pdctl switch-role WORKER decode|prefill  ask the router to change a worker's role
#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "common/flags.h"
#include "server/health_client.h"
#include "server/tls_flags.h"
#include "tools/pdctl/cluster_config.h"
#include "tools/pdctl/commands.h"

ABSL_FLAG(std::string, f, "deploy/local/cluster.yaml",
          "Cluster description (up; also where run_dir comes from).");
ABSL_FLAG(std::string, run_dir, "", "Run directory of the cluster (default: the one in -f).");
ABSL_FLAG(std::string, router, "",
          "status/generate: router address (default: the cluster `up` started).");
ABSL_FLAG(int, decisions, 10, "status: recent placement decisions to show.");
ABSL_FLAG(std::string, prompt, "", "generate: prompt text.");
ABSL_FLAG(std::vector<std::string>, token_ids, {},
          "generate: prompt token ids (comma-separated) instead of text.");
ABSL_FLAG(std::string, model, "", "generate: model name (default: the cluster's only model).");
ABSL_FLAG(std::string, request_id, "", "generate: request id (default: generated).");
ABSL_FLAG(int, max_tokens, 64, "generate: tokens to generate at most.");
ABSL_FLAG(double, temperature, 0.0, "generate: sampling temperature (0: greedy).");
ABSL_FLAG(int64_t, seed, -1, "generate: sampling seed (-1: random).");
ABSL_FLAG(bool, ignore_eos, false, "generate: keep going past end-of-sequence.");
ABSL_FLAG(bool, quiet, false,
          "generate: do not print the completion, only its placement and timings (stderr).");
ABSL_FLAG(absl::Duration, timeout, absl::Minutes(5), "generate: deadline of the request.");
ABSL_FLAG(std::string, slo_class, "",
          "generate: the request's objective class (one of the router's --slo_classes).");
ABSL_FLAG(absl::Duration, ttft, absl::ZeroDuration(),
          "generate: the request's own TTFT objective (0: its class's or the router's).");
ABSL_FLAG(absl::Duration, tpot, absl::ZeroDuration(),
          "generate: the request's own TPOT objective (0: its class's or the router's).");
ABSL_FLAG(absl::Duration, grace, absl::Seconds(30),
          "down: how long each process may drain before SIGKILL.");
ABSL_FLAG(std::string, address, "", "health: the server to check, host:port.");
ABSL_FLAG(std::string, service, "",
          "health: the service to check: pdserve.live, pdserve.ready, a service's full name, or "
          "empty for the whole server.");
ABSL_FLAG(absl::Duration, health_timeout, absl::Seconds(5), "health: how long the check may take.");
ABSL_FLAG(bool, supervise, false,
          "up: keep the cluster running: a detached supervisor starts again a process that exits "
          "(the router at its addresses), with backoff and a restart budget; events in "
          "pdctl status.");
ABSL_FLAG(int, max_restarts, pdserve::pdctl::SupervisionPolicy{}.max_restarts,
          "up --supervise: restarts one process may have within --restart_window; past that it "
          "is left down.");
ABSL_FLAG(absl::Duration, restart_window, pdserve::pdctl::SupervisionPolicy{}.window,
          "up --supervise: the window --max_restarts counts in.");
ABSL_FLAG(absl::Duration, restart_backoff, pdserve::pdctl::SupervisionPolicy{}.backoff_initial,
          "up --supervise: wait before the first restart; doubled for each further one.");
ABSL_FLAG(absl::Duration, restart_backoff_max, pdserve::pdctl::SupervisionPolicy{}.backoff_max,
          "up --supervise: the longest wait before a restart.");
ABSL_FLAG(absl::Duration, restart_startup_timeout,
          pdserve::pdctl::SupervisionPolicy{}.startup_timeout,
          "up --supervise: how long a restarted process has to become healthy.");
ABSL_FLAG(std::string, registration_token_file, "",
          "switch-role: the cluster's registration token (default: the one `up` wrote).");

namespace {

constexpr char kUsage[] =
    "pdctl: run a local pdserve cluster and talk to it.\n"
    "Usage: pdctl up [-f deploy/local/cluster.yaml] [--supervise [--max_restarts=N]]\n"
    "       pdctl status [--router=HOST:PORT]\n"
    "       pdctl generate --prompt=TEXT [--max_tokens=N] [--temperature=T] [--slo_class=C]\n"
    "       pdctl down\n"
    "       pdctl supervise [--run_dir=DIR] [--tls_*]   (what up --supervise starts, detached)\n"
    "       pdctl health --address=HOST:PORT [--service=pdserve.ready] [--tls_*]\n"
    "       pdctl switch-role WORKER_ID decode|prefill [--router=REGISTRY_HOST:PORT]\n"
    "switch-role asks the router to change a worker's role (one started with --role_switching):\n"
    "it finishes its running work, then registers in the other role.\n"
    "health is a probe for Kubernetes exec probes (the kubelet's own gRPC probe speaks no TLS):\n"
    "exit 0 when the service is SERVING, 1 otherwise.\n"
    "status and generate reach a TLS router with --tls_ca (and --tls_cert/--tls_key where it\n"
    "requires client certificates); status reads the router's registry listener when it has\n"
    "one (--router=REGISTRY_HOST:PORT).";

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "pdctl: %s\n", std::string(status.message()).c_str());
  return 1;
}

std::string RunDir() {
  if (!absl::GetFlag(FLAGS_run_dir).empty()) return absl::GetFlag(FLAGS_run_dir);
  auto config = pdserve::pdctl::LoadClusterConfig(absl::GetFlag(FLAGS_f));
  return config.ok() ? config->run_dir : pdserve::pdctl::ClusterConfig().run_dir;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args = pdserve::ParseCommandLine(argc, argv, kUsage);
  if (args.size() == 4 && args[1] == "switch-role") {
    auto security = pdserve::GrpcSecurity::FromConfig(pdserve::TlsConfigFromFlags());
    if (!security.ok()) {
      std::fprintf(stderr, "%s\n", std::string(security.status().message()).c_str());
      return 2;
    }
    const absl::Status s = pdserve::pdctl::SwitchRole(RunDir(), absl::GetFlag(FLAGS_router),
                                                      absl::GetFlag(FLAGS_registration_token_file),
                                                      *security, args[2], args[3], std::cout);
    return s.ok() ? 0 : Fail(s);
  }
  if (args.size() != 2) {
    std::fprintf(stderr, "%s\n", kUsage);
    return 2;
  }
  const std::string& command = args[1];
  auto security = pdserve::GrpcSecurity::FromConfig(pdserve::TlsConfigFromFlags());
  if (!security.ok()) {
    std::fprintf(stderr, "%s\n", std::string(security.status().message()).c_str());
    return 2;
  }
  absl::Status status;
  if (command == "health") {
    const std::string address = absl::GetFlag(FLAGS_address);
    if (address.empty()) {
      std::fprintf(stderr, "health: give --address=HOST:PORT\n");
      return 2;
    }
    auto state = pdserve::CheckHealth(address, absl::GetFlag(FLAGS_health_timeout), *security,
                                      absl::GetFlag(FLAGS_service));
    if (!state.ok()) return Fail(state.status());
    if (*state != pdserve::HealthState::kServing) {
      std::fprintf(stderr, "pdctl: %s: '%s' is not serving\n", address.c_str(),
                   absl::GetFlag(FLAGS_service).c_str());
      return 1;
    }
    return 0;
  }
  pdserve::pdctl::SupervisionPolicy policy;
  policy.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  policy.window = absl::GetFlag(FLAGS_restart_window);
  policy.backoff_initial = absl::GetFlag(FLAGS_restart_backoff);
  policy.backoff_max = absl::GetFlag(FLAGS_restart_backoff_max);
  policy.startup_timeout = absl::GetFlag(FLAGS_restart_startup_timeout);
  if (command == "up") {
    status =
        pdserve::pdctl::Up(absl::GetFlag(FLAGS_f), std::cout,
                           absl::GetFlag(FLAGS_supervise) ? std::optional(policy) : std::nullopt);
  } else if (command == "supervise") {
    status = pdserve::pdctl::Supervise(RunDir(), policy, *security);
  } else if (command == "status") {
    const int decisions = absl::GetFlag(FLAGS_decisions);
    if (decisions < 0 || decisions > 1000) {
      std::fprintf(stderr, "--decisions: must be in [0, 1000]\n");
      return 2;
    }
    status = pdserve::pdctl::Status(RunDir(), absl::GetFlag(FLAGS_router), decisions, *security,
                                    std::cout);
  } else if (command == "generate") {
    pdserve::pdctl::GenerateOptions o;
    o.run_dir = RunDir();
    o.router = absl::GetFlag(FLAGS_router);
    o.security = *security;
    o.prompt = absl::GetFlag(FLAGS_prompt);
    for (const std::string& t : absl::GetFlag(FLAGS_token_ids)) {
      uint32_t id;
      if (!absl::SimpleAtoi(t, &id)) {
        std::fprintf(stderr, "--token_ids: '%s' is not a token id\n", t.c_str());
        return 2;
      }
      o.token_ids.push_back(id);
    }
    if (o.prompt.empty() && o.token_ids.empty()) {
      std::fprintf(stderr, "generate: give --prompt or --token_ids\n");
      return 2;
    }
    o.model = absl::GetFlag(FLAGS_model);
    o.request_id = absl::GetFlag(FLAGS_request_id);
    o.max_tokens = absl::GetFlag(FLAGS_max_tokens);
    o.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
    if (absl::GetFlag(FLAGS_seed) >= 0) o.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
    o.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
    o.quiet = absl::GetFlag(FLAGS_quiet);
    o.timeout = absl::GetFlag(FLAGS_timeout);
    o.slo_class = absl::GetFlag(FLAGS_slo_class);
    o.ttft_ms = absl::ToDoubleMilliseconds(absl::GetFlag(FLAGS_ttft));
    o.tpot_ms = absl::ToDoubleMilliseconds(absl::GetFlag(FLAGS_tpot));
    status = pdserve::pdctl::Generate(o, std::cout, std::cerr);
  } else if (command == "down") {
    status = pdserve::pdctl::Down(RunDir(), absl::GetFlag(FLAGS_grace), std::cout);
  } else {
    std::fprintf(stderr, "unknown command '%s'\n%s\n", command.c_str(), kUsage);
    return 2;
  }
  return status.ok() ? 0 : Fail(status);
}
