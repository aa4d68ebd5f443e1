#include "kvtransfer/ucx/peer_address_check.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "kvtransfer/descriptor_codec.h"

extern char** environ;

namespace pdserve::kvtransfer {
namespace {

// The probe's exit codes (probe_main.cc).
constexpr int kProbeAccepted = 0;
constexpr int kProbeAddressRejected = 3;
constexpr int kProbeRkeyRejected = 4;

std::string CacheKey(const std::string& address, const std::string& rkey) {
  return absl::StrCat(address.size(), ":", address, rkey);
}

std::string BesideSelf(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? name : (self.parent_path() / name).string();
}

// Runs `argv` with stdout and stderr discarded (posix_spawn: safe in a threaded process) and
// returns its wait status, or nullopt after `timeout` (the process is then killed).
absl::StatusOr<std::optional<int>> RunBounded(std::vector<std::string> argv,
                                              absl::Duration timeout) {
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int error = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0)
    return absl::UnavailableError(absl::StrCat("spawn ", argv[0], ": ", std::strerror(error)));
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration poll = absl::Microseconds(500);
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return std::optional<int>(status);
    if (done < 0 && errno != EINTR)
      return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
    if (absl::Now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return std::optional<int>();
    }
    absl::SleepFor(poll);
    poll = std::min(poll * 2, absl::Milliseconds(10));
  }
}

}  // namespace

int PeerAddressChecker::probes_run() const {
  absl::MutexLock lock(&mu_);
  return probes_run_;
}

absl::Status PeerAddressChecker::Check(const std::string& worker_address,
                                       const std::string& packed_rkey) {
  if (worker_address.empty() || worker_address.size() > kMaxWorkerAddressBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv target worker_address: ", worker_address.size(), " bytes, must be 1..",
                     kMaxWorkerAddressBytes));
  }
  if (packed_rkey.size() > kMaxPackedRkeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("kv target packed_rkey: ", packed_rkey.size(),
                                                   " bytes, must be at most ",
                                                   kMaxPackedRkeyBytes));
  }
  const std::string key = CacheKey(worker_address, packed_rkey);
  absl::MutexLock lock(&mu_);
  if (accepted_.contains(key)) return absl::OkStatus();
  ++probes_run_;
  absl::Status verdict = Probe(worker_address, packed_rkey);
  if (verdict.ok()) {
    if (static_cast<int>(accepted_.size()) >= config_.max_cached) accepted_.clear();
    accepted_.insert(key);
  } else {
    PDS_LOG_EVERY_N_SEC(WARNING, 1) << "kv transport: refused a peer descriptor: " << verdict;
  }
  return verdict;
}

absl::Status PeerAddressChecker::Probe(const std::string& worker_address,
                                       const std::string& packed_rkey) {
  const std::string binary = BesideSelf(config_.probe_binary);
  auto status = RunBounded({binary, absl::StrCat("--address_hex=", ToHex(worker_address)),
                            absl::StrCat("--rkey_hex=", ToHex(packed_rkey)),
                            absl::StrCat("--transports=", config_.transports),
                            absl::StrCat("--net_devices=", config_.net_devices)},
                           config_.timeout);
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("kv transport: cannot check a peer descriptor: ", status.status().message()));
  }
  if (!status->has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv target worker_address: UCX did not finish unpacking it within ",
                     absl::FormatDuration(config_.timeout)));
  }
  const int wait_status = **status;
  if (WIFEXITED(wait_status)) {
    switch (WEXITSTATUS(wait_status)) {
      case kProbeAccepted:
        return absl::OkStatus();
      case kProbeAddressRejected:
        return absl::InvalidArgumentError(
            "kv target worker_address: UCX rejected it (not a UCX worker address)");
      case kProbeRkeyRejected:
        return absl::InvalidArgumentError(
            "kv target packed_rkey: UCX rejected it (not a packed remote key)");
      default:
        return absl::UnavailableError(absl::StrCat("kv transport: ", binary, " exited with status ",
                                                   WEXITSTATUS(wait_status)));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("kv target worker_address/packed_rkey: UCX crashed unpacking them (",
                   strsignal(WTERMSIG(wait_status)), ")"));
}

}  // namespace pdserve::kvtransfer
