#include "decode_worker/role_switching_worker.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pdserve::decode {
namespace {

const char* RoleName(v1::WorkerRole role) {
  return role == v1::WORKER_ROLE_DECODE ? "decode" : "prefill";
}

}  // namespace

absl::Status RoleSwitchingWorkerConfig::Validate() const {
  RETURN_IF_ERROR(decode.Validate());
  RETURN_IF_ERROR(prefill.Validate());
  if (initial_role != "decode" && initial_role != "prefill") {
    return absl::InvalidArgumentError(
        absl::StrCat("--role: must be decode or prefill, got '", initial_role, "'"));
  }
  if (decode.kv_transport != "ucx") {
    return absl::InvalidArgumentError(
        "--role_switching needs --kv_transport=ucx (the prefill role ships KV)");
  }
  if (switch_drain_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--switch_drain_timeout: must be positive");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RoleSwitchingWorker>> RoleSwitchingWorker::Create(
    const RoleSwitchingWorkerConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<RoleSwitchingWorker> w(new RoleSwitchingWorker());
  w->config_ = config;
  WorkerProcessConfig process = config.decode.EffectiveProcess();
  process.role = config.initial_role;
  ASSIGN_OR_RETURN(w->process_, WorkerProcess::Create(process));
  ASSIGN_OR_RETURN(w->decode_, DecodeRole::Create(w->process_.get(), config.decode));
  ASSIGN_OR_RETURN(w->prefill_, prefill::PrefillRole::Create(w->process_.get(), config.prefill));
  RETURN_IF_ERROR(w->process_->StartServer({w->decode_->service(), w->prefill_->service()}));
  RETURN_IF_ERROR(w->decode_->Attach());
  w->prefill_->Attach();
  const v1::WorkerRole initial =
      config.initial_role == "decode" ? v1::WORKER_ROLE_DECODE : v1::WORKER_ROLE_PREFILL;
  {
    absl::MutexLock lock(&w->mu_);
    w->role_ = initial;
  }
  // The role not taken refuses its calls (a peer with a stale view is sent elsewhere).
  if (initial == v1::WORKER_ROLE_DECODE) {
    w->prefill_->BeginDrain();
  } else {
    w->decode_->BeginDrain();
  }
  prometheus::Registry& metrics = *w->process_->metrics_registry();
  auto& role = prometheus::BuildGauge()
                   .Name("pdserve_worker_role")
                   .Help("1 for the role this worker takes work in (a role-switching worker).")
                   .Register(metrics);
  w->decode_role_gauge_ = &role.Add({{"role", "decode"}});
  w->prefill_role_gauge_ = &role.Add({{"role", "prefill"}});
  w->switches_ = &prometheus::BuildCounter()
                      .Name("pdserve_worker_role_switches_total")
                      .Help(
                          "Role changes this worker ran, by target role and outcome: "
                          "completed, or aborted (its work did not finish within "
                          "--switch_drain_timeout, or it was stopping).")
                      .Register(metrics);
  w->PublishRole(initial);
  return w;
}

WorkerRegistration RoleSwitchingWorker::Registration(v1::WorkerRole role) const {
  WorkerRegistration r =
      role == v1::WORKER_ROLE_DECODE ? decode_->Registration() : prefill_->Registration();
  r.role_switching = true;
  return r;
}

RegistryClient::ReportFn RoleSwitchingWorker::Report(v1::WorkerRole role) {
  if (role == v1::WORKER_ROLE_DECODE) {
    DecodeRole* decode = decode_.get();
    return [decode](bool reconnected, WorkerReport* report, PrefixCacheChanges* prefix) {
      decode->FillReport(reconnected, report, prefix);
    };
  }
  prefill::PrefillRole* prefill = prefill_.get();
  return
      [prefill](bool, WorkerReport* report, PrefixCacheChanges*) { prefill->FillReport(report); };
}

void RoleSwitchingWorker::PublishRole(v1::WorkerRole role) {
  decode_role_gauge_->Set(role == v1::WORKER_ROLE_DECODE ? 1 : 0);
  prefill_role_gauge_->Set(role == v1::WORKER_ROLE_PREFILL ? 1 : 0);
}

void RoleSwitchingWorker::Run(ShutdownSignal& shutdown) {
  decode_->Start();
  prefill_->Start();
  process_->SetRoleSwitchHandler([this](const v1::RoleSwitch& order) {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    if (switching_ || order_.has_value()) {
      PDS_LOG(WARNING) << "role switch to " << RoleName(order.role())
                       << " ignored: a switch is in progress";
      return;
    }
    order_ = order;
  });
  switcher_ = std::thread([this] { RunSwitches(); });
  v1::WorkerRole role;
  {
    absl::MutexLock lock(&mu_);
    role = role_;
  }
  process_->Serve(shutdown, Registration(role), Report(role), [this] {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;  // A switch in progress gives up; none starts.
    }
    decode_->BeginDrain();
    prefill_->BeginDrain();
  });
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  switcher_.join();
  decode_->Stop();
  prefill_->Stop();
}

void RoleSwitchingWorker::RunSwitches() {
  while (true) {
    v1::RoleSwitch order;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](RoleSwitchingWorker* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
            return w->stopping_ || w->order_.has_value();
          },
          this));
      if (stopping_) return;
      order = *order_;
      order_.reset();
      switching_ = true;
    }
    Switch(order.role(), order.reason());
    absl::MutexLock lock(&mu_);
    switching_ = false;
  }
}

void RoleSwitchingWorker::Switch(v1::WorkerRole to, const std::string& reason) {
  v1::WorkerRole from;
  {
    absl::MutexLock lock(&mu_);
    from = role_;
  }
  if (to == from || (to != v1::WORKER_ROLE_DECODE && to != v1::WORKER_ROLE_PREFILL)) {
    PDS_LOG(WARNING) << "role switch to " << v1::WorkerRole_Name(to) << " ignored: it is a "
                     << RoleName(from) << " worker";
    return;
  }
  const absl::Time start = absl::Now();
  PDS_LOG(INFO) << "switching from " << RoleName(from) << " to " << RoleName(to) << " (" << reason
                << "): finishing the " << RoleName(from) << " work first";
  const bool from_decode = from == v1::WORKER_ROLE_DECODE;
  if (from_decode) {
    // What has not started goes back to the router: the switch waits for the started
    // streams only, not for the offloads queued behind a busy prefill pool (the shortage the
    // switch is often ordered to relieve; bench/README, sim, the hand-back).
    decode_->BeginDrainHandingBack();
  } else {
    prefill_->BeginDrain();
  }
  // Drained in slices, so that a shutdown meanwhile is seen within one.
  const absl::Time deadline = start + config_.switch_drain_timeout;
  bool empty = false;
  bool stopping = false;
  while (!empty && !stopping && absl::Now() < deadline) {
    const absl::Time slice = std::min(deadline, absl::Now() + absl::Milliseconds(200));
    empty = from_decode ? decode_->WaitUntilEmpty(slice) : prefill_->WaitUntilEmpty(slice);
    absl::MutexLock lock(&mu_);
    stopping = stopping_;
  }
  if (!empty || stopping) {
    if (!stopping) {
      PDS_LOG(WARNING) << "role switch to " << RoleName(to) << " given up: the " << RoleName(from)
                       << " work did not finish within " << config_.switch_drain_timeout
                       << "; taking " << RoleName(from) << " work again";
      if (from_decode) {
        decode_->EndDrain();
      } else {
        prefill_->EndDrain();
      }
    }
    switches_->Add({{"to", RoleName(to)}, {"outcome", "aborted"}}).Increment();
    return;
  }
  if (from_decode) {
    const int dropped = decode_->DropPrefixCache();
    PDS_LOG(INFO) << "dropped " << dropped << " cached prefix blocks";
    prefill_->EndDrain();
  } else {
    decode_->EndDrain();
  }
  {
    absl::MutexLock lock(&mu_);
    role_ = to;
  }
  PublishRole(to);
  if (!process_->Reregister(Registration(to), Report(to))) return;  // Stopping.
  switches_->Add({{"to", RoleName(to)}, {"outcome", "completed"}}).Increment();
  PDS_LOG(INFO) << "now a " << RoleName(to) << " worker (switch took "
                << absl::FormatDuration(absl::Now() - start) << ")";
}

RoleSwitchingWorker::~RoleSwitchingWorker() {
  if (process_) process_->StopServing();  // No call reaches the services after this.
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (switcher_.joinable()) switcher_.join();
  decode_.reset();
  prefill_.reset();
  process_.reset();  // The pool and the transport last.
}

}  // namespace pdserve::decode
