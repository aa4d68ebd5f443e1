#include "tools/pdctl/commands.h"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/secret_file.h"
#include "common/shutdown_signal.h"
#include "common/status_macros.h"
#include "common/text_table.h"
#include "pdserve/v1/registry.grpc.pb.h"
#include "server/child_process.h"
#include "server/health_client.h"
#include "server/registry_client.h"
#include "tools/client/generation_client.h"
#include "tools/pdctl/cluster_config.h"
#include "tools/pdctl/cluster_launcher.h"
#include "tools/pdctl/cluster_state.h"
#include "wire/request_bridge.h"

namespace pdserve::pdctl {
namespace {

std::string RouterOf(const std::string& run_dir, const std::string& override_address) {
  if (!override_address.empty()) return override_address;
  auto state = ClusterState::Read(ClusterState::PathIn(run_dir));
  return state.ok() ? state->router : "";
}

// Where GetClusterStatus is served: the registry listener when the cluster has one.
std::string RegistryOf(const std::string& run_dir, const std::string& override_address) {
  if (!override_address.empty()) return override_address;
  auto state = ClusterState::Read(ClusterState::PathIn(run_dir));
  return state.ok() ? state->registry_address() : "";
}

// The supervisor, each process's restarts, and the latest events.
void PrintSupervision(const ClusterState& state, const std::string& run_dir, std::ostream& out) {
  const std::vector<SupervisionEvent> events = ReadEvents(run_dir, 10);
  if (state.supervisor_pid == 0 && events.empty()) return;
  out << "\nsupervisor: "
      << (state.supervisor_pid > 0 && ProcessRuns(state.supervisor_pid, "pdctl")
              ? absl::StrCat("running (pid ", state.supervisor_pid, ")")
              : std::string("not running"))
      << "; restarts:";
  for (const ProcessState& p : state.processes) out << " " << p.name << "=" << p.restarts;
  out << "\n";
  Table table({"time", "process", "event", "detail"});
  for (const SupervisionEvent& e : events) {
    table.AddRow({absl::FormatTime("%H:%M:%S", e.time, absl::LocalTimeZone()), e.process, e.event,
                  e.detail});
  }
  if (!events.empty()) out << "supervision events (oldest first)\n" << table.ToString();
}

// Until the supervisor's "supervising" event (written after `started`), nothing restarts a
// process that dies, and a supervisor that fails at start (an unreadable state, a bad flag)
// has not said why: `up` reports it only once it watches. Checking that its pid runs was not
// enough: a child still inside exec has no command line to recognise it by yet.
absl::Status WaitSupervising(ChildProcess& supervisor, const std::string& run_dir,
                             absl::Time started, absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    for (const SupervisionEvent& e : ReadEvents(run_dir, 0)) {
      if (e.process == "supervisor" && e.event == "supervising" && e.time >= started)
        return absl::OkStatus();
    }
    if (!supervisor.running()) {
      return absl::UnavailableError(absl::StrCat("it exited at start; its log (",
                                                 supervisor.log_path(), "):\n", supervisor.Log()));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("it did not start watching within ",
                                                      absl::FormatDuration(timeout),
                                                      " (log: ", supervisor.log_path(), ")"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

std::string ModeName(v1::PlacementMode mode) {
  return mode == v1::PLACEMENT_MODE_OFFLOAD ? "OFFLOAD"
         : mode == v1::PLACEMENT_MODE_LOCAL ? "LOCAL"
                                            : "?";
}

}  // namespace

absl::Status Up(const std::string& config_path, std::ostream& out,
                const std::optional<SupervisionPolicy>& supervision) {
  if (supervision.has_value()) RETURN_IF_ERROR(supervision->Validate());
  // SIGINT/SIGTERM from here on are taken by the launch, which stops what it started, rather
  // than killing pdctl and leaving its detached processes behind.
  ShutdownSignal interrupt;
  auto config = LoadClusterConfig(config_path);
  if (!config.ok()) return config.status();
  const ClusterConfig& c = *config;
  const std::string state_path = ClusterState::PathIn(c.run_dir);
  if (auto old = ClusterState::Read(state_path); old.ok()) {
    for (const ProcessState& p : old->processes) {
      if (ProcessRuns(p.pid, p.binary)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "a cluster is already up (", p.name, ", pid ", p.pid, "); run pdctl down first"));
      }
    }
  }
  if (!std::filesystem::exists(c.model_dir + "/config.json") && !c.model_preset.empty()) {
    out << "making the " << c.model_preset << " model in " << c.model_dir << " (first use)..."
        << std::endl;
  }
  if (absl::Status s = EnsureClusterModel(c, config_path); !s.ok()) return s;
  // cluster.json lists each process as soon as it runs: a pdctl killed mid-launch (SIGKILL
  // cannot be caught) leaves nothing `pdctl down` cannot find.
  LaunchHooks hooks;
  hooks.interrupt = &interrupt;
  hooks.on_progress = [&state_path](const ClusterState& so_far) {
    so_far.Write(state_path).IgnoreError();
  };
  auto cluster = LaunchCluster(c, /*detached=*/true, hooks);
  if (!cluster.ok()) {
    // The handles stopped every process they started: nothing is left to list.
    std::filesystem::remove(state_path);
    return cluster.status();
  }
  if (absl::Status s = cluster->state.Write(state_path); !s.ok()) return s;
  cluster->Release();  // They outlive pdctl now.
  if (supervision.has_value()) {
    std::vector<std::string> args = {"supervise", "--run_dir=" + c.run_dir};
    for (const std::string& flag : supervision->AsFlags()) args.push_back(flag);
    const absl::Time started = absl::Now();
    auto supervisor = ChildProcess::Start(ChildOptions{.binary = "pdctl",
                                                       .args = args,
                                                       .expect_serving_info = false,
                                                       .run_dir = c.run_dir,
                                                       .name = "supervisor",
                                                       .detached = true});
    const absl::Status watching =
        supervisor.ok() ? WaitSupervising(**supervisor, c.run_dir, started) : supervisor.status();
    if (!watching.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "the cluster is up but its supervisor did not start (pdctl down stops the cluster): ",
          watching.message()));
    }
    cluster->state.supervisor_pid = (*supervisor)->Release();
    if (absl::Status s = cluster->state.Write(state_path); !s.ok()) return s;
  }

  Table table({"process", "pid", "grpc", "metrics", "log"});
  for (const ProcessState& p : cluster->state.processes) {
    table.AddRow({p.name, absl::StrCat(p.pid), p.grpc, "http://" + p.metrics + "/metrics", p.log});
  }
  out << "cluster up (policy " << c.policy << ", model " << c.model_dir << ")\n"
      << table.ToString() << "clients: " << cluster->state.router << " (pdserve.v1.Generation)\n"
      << (cluster->state.router_http.empty()
              ? ""
              : absl::StrCat("openai: http://", cluster->state.router_http,
                             "/v1 (OpenAI-compatible HTTP API)\n"))
      << "state: " << state_path << "\n";
  if (cluster->state.supervisor_pid > 0) {
    out << "supervised (pid " << cluster->state.supervisor_pid << "): a process that exits is "
        << "started again; events in " << EventsPathIn(c.run_dir) << " and pdctl status\n";
  }
  return absl::OkStatus();
}

absl::Status Supervise(const std::string& run_dir, const SupervisionPolicy& policy,
                       const GrpcSecurity& security) {
  ShutdownSignal stop;
  Supervisor supervisor(run_dir, policy, security);
  return supervisor.Run(stop);
}

absl::Status Status(const std::string& run_dir, const std::string& router_override, int decisions,
                    const GrpcSecurity& security, std::ostream& out) {
  const std::string router = RegistryOf(run_dir, router_override);
  if (router.empty())
    return absl::NotFoundError("no cluster is up here (pdctl up, or give --router)");
  auto status = FetchClusterStatus(router, decisions, security);
  if (!status.ok()) return status.status();
  out << "router " << router << ": policy " << status->policy() << ", " << status->in_flight()
      << " requests in flight\n\n";
  Table workers({"worker", "role", "address", "running", "waiting", "awaiting_kv", "kv_used",
                 "prefill_backlog", "prefill_tok/s", "router_in_flight", "cached_blocks",
                 "last_report"});
  for (const v1::WorkerStatus& w : status->workers()) {
    const v1::WorkerRegistration& r = w.registration();
    const v1::LoadReport& l = w.load();
    const bool decode = r.role() == v1::WORKER_ROLE_DECODE;
    const double used =
        l.total_blocks() == 0 ? 0 : 1.0 - static_cast<double>(l.free_blocks()) / l.total_blocks();
    // A role in change, or one taking no new work, says so.
    const std::string role =
        absl::StrCat(decode ? "decode" : "prefill", w.switching()  ? " (switching)"
                                                    : l.draining() ? " (draining)"
                                                                   : "");
    workers.AddRow(
        {r.worker_id(), role, r.grpc_address(), absl::StrCat(l.running()),
         absl::StrCat(l.waiting()), decode ? absl::StrCat(l.awaiting_kv()) : "-",
         decode ? Fixed(100 * used, 1) + "%" : "-", absl::StrCat(l.pending_prefill_tokens()),
         decode ? "-" : Fixed(l.prefill_tokens_per_second(), 0), absl::StrCat(w.router_in_flight()),
         decode ? absl::StrCat(w.indexed_blocks()) : "-",
         Fixed(w.seconds_since_report(), 1) + "s ago"});
  }
  out << "workers\n" << workers.ToString() << "\n";
  Table recent({"time", "request", "prompt", "U", "D", "decision", "reason", "decode", "prefill",
                "interference_ms", "offload_cost_ms", "decide_us"});
  for (const v1::DecisionRecord& d : status->recent_decisions()) {
    const v1::Placement& p = d.placement();
    recent.AddRow({absl::FormatTime("%H:%M:%S", absl::FromUnixNanos(d.time_unix_nanos()),
                                    absl::LocalTimeZone()),
                   d.request_id(), absl::StrCat(d.prompt_tokens()),
                   absl::StrCat(p.uncached_tokens()), absl::StrCat(p.running_decodes()),
                   ModeName(p.mode()), p.reason(), p.decode_worker_id(),
                   p.prefill_worker_id().empty() ? "-" : p.prefill_worker_id(),
                   Fixed(p.predicted_interference_ms(), 1), Fixed(p.predicted_offload_cost_ms(), 1),
                   Fixed(d.decision_us(), 1)});
  }
  out << "recent placement decisions (newest first)\n"
      << (recent.empty() ? "(none yet)\n" : recent.ToString());
  if (auto state = ClusterState::Read(ClusterState::PathIn(run_dir));
      state.ok() && router_override.empty()) {
    out << "\nmetrics:";
    for (const ProcessState& p : state->processes)
      out << " " << p.name << "=http://" << p.metrics << "/metrics";
    out << "\n";
    PrintSupervision(*state, run_dir, out);
  }
  return absl::OkStatus();
}

absl::Status SwitchRole(const std::string& run_dir, const std::string& router_override,
                        const std::string& token_file, const GrpcSecurity& security,
                        const std::string& worker_id, const std::string& role_name,
                        std::ostream& out) {
  const std::string router = RegistryOf(run_dir, router_override);
  if (router.empty())
    return absl::NotFoundError("no cluster is up here (pdctl up, or give --router)");
  v1::SwitchRoleRequest request;
  request.set_worker_id(worker_id);
  if (role_name == "decode") {
    request.set_role(v1::WORKER_ROLE_DECODE);
  } else if (role_name == "prefill") {
    request.set_role(v1::WORKER_ROLE_PREFILL);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("role: must be decode or prefill, got '", role_name, "'"));
  }
  std::string token;
  const std::string path = !token_file.empty()       ? token_file
                           : router_override.empty() ? run_dir + "/registration-token"
                                                     : "";
  if (!path.empty()) {
    auto read = ReadSecretFile(path, "--registration_token_file");
    if (read.ok()) {
      token = *read;
    } else if (!token_file.empty()) {
      return read.status();
    }
  }
  auto stub = v1::Registry::NewStub(client::MakeChannel(router, security));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  if (!token.empty()) ctx.AddMetadata(kRegistrationTokenHeader, token);
  v1::SwitchRoleResponse response;
  const grpc::Status s = stub->SwitchRole(&ctx, request, &response);
  if (!s.ok()) {
    const absl::Status status = wire::FromGrpc(s);  // Keeps the code (refused, unreachable).
    return absl::Status(status.code(), absl::StrCat("router ", router, ": ", status.message()));
  }
  out << response.message() << "\n"
      << "it finishes its running work first; `pdctl status` shows it switching\n";
  return absl::OkStatus();
}

absl::Status Generate(const GenerateOptions& o, std::ostream& text, std::ostream& out) {
  const std::string router = RouterOf(o.run_dir, o.router);
  if (router.empty())
    return absl::NotFoundError("no cluster is up here (pdctl up, or give --router)");
  v1::GenerateRequest request;
  request.set_request_id(o.request_id);
  request.set_model(o.model);
  if (!o.prompt.empty()) {
    request.set_text(o.prompt);
  } else {
    for (uint32_t id : o.token_ids) request.mutable_token_ids()->add_ids(id);
  }
  v1::SamplingParams* sampling = request.mutable_sampling();
  sampling->set_max_tokens(o.max_tokens);
  sampling->set_temperature(o.temperature);
  if (o.seed.has_value()) sampling->set_seed(*o.seed);
  sampling->set_ignore_eos(o.ignore_eos);
  if (!o.slo_class.empty()) request.mutable_objectives()->set_slo_class(o.slo_class);
  if (o.ttft_ms != 0) request.mutable_objectives()->set_ttft_ms(o.ttft_ms);
  if (o.tpot_ms != 0) request.mutable_objectives()->set_tpot_ms(o.tpot_ms);
  const auto outcome = client::CallGenerate(client::MakeChannel(router, o.security), request,
                                            o.timeout, [&](const v1::GenerateResponse& m) {
                                              if (!o.quiet && !m.text().empty())
                                                text << m.text() << std::flush;
                                            });
  if (!outcome.status.ok()) return wire::FromGrpc(outcome.status);
  const v1::GenerateResult& r = outcome.result;
  const v1::Placement& p = r.placement();
  const v1::StageTimings& t = r.timings();
  if (!o.quiet) text << std::endl;
  out << "placement: " << ModeName(p.mode()) << " (" << p.reason() << ", policy " << p.policy()
      << ") decode " << p.decode_worker_id();
  if (p.mode() == v1::PLACEMENT_MODE_OFFLOAD) out << ", prefill " << p.prefill_worker_id();
  if (p.fell_back_to_local()) out << ", fell back to local: " << p.fallback_cause();
  out << absl::StrFormat(
      "; U=%d of %d prompt tokens, D=%d running; predicted interference %.1f ms vs offload "
      "cost %.1f ms, TTFT local %.1f ms / offload %.1f ms\n",
      p.uncached_tokens(), r.usage().prompt_tokens(), p.running_decodes(),
      p.predicted_interference_ms(), p.predicted_offload_cost_ms(), p.predicted_ttft_local_ms(),
      p.predicted_ttft_offload_ms());
  out << absl::StrFormat(
      "timings: TTFT %.1f ms (router %.2f, queue %.1f, prefill queue %.1f, prefill %.1f, transfer "
      "tail %.2f), "
      "decode %.1f ms, e2e %.1f ms; tokens: %d prompt (%d cached), %d generated, finish %s\n",
      t.ttft_ms(), t.router_ms(), t.queue_ms(), t.prefill_queue_ms(), t.prefill_ms(),
      t.transfer_tail_ms(), t.decode_ms(), t.e2e_ms(), r.usage().prompt_tokens(),
      r.usage().cached_prompt_tokens(), r.usage().completion_tokens(),
      v1::FinishReason_Name(r.finish_reason()));
  return absl::OkStatus();
}

absl::Status Down(const std::string& run_dir, absl::Duration grace, std::ostream& out) {
  const std::string path = ClusterState::PathIn(run_dir);
  auto state = ClusterState::Read(path);
  if (!state.ok()) return state.status();
  // The supervisor first, or it would start again what is being stopped; then the state
  // again (it may have restarted a process meanwhile).
  if (const pid_t supervisor = state->supervisor_pid;
      supervisor > 0 && ProcessRuns(supervisor, "pdctl")) {
    kill(supervisor, SIGTERM);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (ProcessRuns(supervisor, "pdctl") && absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(20));
    if (ProcessRuns(supervisor, "pdctl")) kill(supervisor, SIGKILL);
    out << "stopped the supervisor (pid " << supervisor << ")\n";
    state = ClusterState::Read(path);
    if (!state.ok()) return state.status();
  }
  // Workers first (they drain their requests), the router last.
  std::vector<ProcessState> order(state->processes.rbegin(), state->processes.rend());
  for (const ProcessState& p : order) {
    if (!ProcessRuns(p.pid, p.binary)) {
      out << p.name << " (pid " << p.pid << ") was not running\n";
      continue;
    }
    kill(p.pid, SIGTERM);
    const absl::Time deadline = absl::Now() + grace;
    while (ProcessRuns(p.pid, p.binary) && absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(20));
    if (ProcessRuns(p.pid, p.binary)) {
      kill(p.pid, SIGKILL);
      out << "killed " << p.name << " (pid " << p.pid << ") after " << absl::FormatDuration(grace)
          << "\n";
    } else {
      out << "stopped " << p.name << " (pid " << p.pid << ")\n";
    }
  }
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  out << "cluster down (logs kept in " << run_dir << ")\n";
  return absl::OkStatus();
}

}  // namespace pdserve::pdctl
