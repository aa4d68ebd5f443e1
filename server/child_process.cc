#include "server/child_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/health_client.h"

namespace pdserve {

std::string BinaryPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return name;
  return (self.parent_path() / name).string();
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(ChildOptions options) {
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  if (options.run_dir.empty()) {
    char dir_template[] = "/tmp/pdserve-child-XXXXXX";
    if (mkdtemp(dir_template) == nullptr) {
      return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
    }
    child->dir_ = dir_template;
    child->owns_dir_ = true;
  } else {
    std::error_code error;
    std::filesystem::create_directories(options.run_dir, error);
    if (error)
      return absl::InternalError(absl::StrCat("create ", options.run_dir, ": ", error.message()));
    child->dir_ = options.run_dir;
  }
  child->log_path_ = absl::StrCat(child->dir_, "/", options.name, ".log");
  child->info_path_ = absl::StrCat(child->dir_, "/", options.name, ".serving");
  child->security_ = options.security;
  std::filesystem::remove(child->info_path_);  // A stale file from an earlier run.

  const std::string binary = BinaryPath(options.binary);
  std::vector<std::string> argv_storage{binary};
  for (auto& arg : options.args) argv_storage.push_back(arg);
  if (options.expect_serving_info) {
    argv_storage.push_back(absl::StrCat("--serving_info_path=", child->info_path_));
  }
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  const int log_fd = ::open(child->log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (log_fd < 0) return absl::InternalError(absl::StrCat("open log: ", std::strerror(errno)));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(log_fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // Child: die with the parent (unless detached), inherit no blocked signals, log to the
    // file, run on the given CPUs.
    if (options.detached) {
      setsid();
    } else {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
    }
    if (!options.cpus.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int cpu : options.cpus) CPU_SET(cpu, &set);
      if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        std::fprintf(stderr, "sched_setaffinity: %s\n", std::strerror(errno));
        _exit(127);
      }
    }
    if (options.nice != 0 && setpriority(PRIO_PROCESS, 0, options.nice) != 0) {
      std::fprintf(stderr, "setpriority: %s\n", std::strerror(errno));
      _exit(127);
    }
    if (options.max_open_files > 0) {
      const rlimit files{static_cast<rlim_t>(options.max_open_files),
                         static_cast<rlim_t>(options.max_open_files)};
      if (setrlimit(RLIMIT_NOFILE, &files) != 0) {
        std::fprintf(stderr, "setrlimit(RLIMIT_NOFILE): %s\n", std::strerror(errno));
        _exit(127);
      }
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    ::close(log_fd);
    for (auto& [name, value] : options.env) setenv(name.c_str(), value.c_str(), 1);
    execv(binary.c_str(), argv.data());
    std::fprintf(stderr, "execv %s: %s\n", binary.c_str(), std::strerror(errno));
    _exit(127);
  }
  ::close(log_fd);
  child->pid_ = pid;
  if (!options.expect_serving_info) return child;

  const absl::Time deadline = absl::Now() + options.startup_timeout;
  while (absl::Now() < deadline) {
    auto info = ReadServingInfo(child->info_path_);
    if (info.ok()) {
      child->info_ = *std::move(info);
      return child;
    }
    if (!child->running()) {
      return absl::FailedPreconditionError(absl::StrCat(binary, " exited (status ",
                                                        child->exit_status_,
                                                        ") before serving; log:\n", child->Log()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(binary, " did not write its serving info within ",
                                                  absl::FormatDuration(options.startup_timeout),
                                                  "; log:\n", child->Log()));
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !reaped_) {
    auto status = Stop(SIGTERM, absl::Seconds(10));
    if (!status.ok()) Kill();
  }
  std::error_code ignored;
  if (owns_dir_) std::filesystem::remove_all(dir_, ignored);
}

pid_t ChildProcess::Release() {
  reaped_ = true;  // Nothing left for the destructor to stop.
  return pid_;
}

std::string ChildProcess::grpc_address() const {
  auto it = info_.find("grpc");
  return it == info_.end() ? std::string() : it->second;
}

std::string ChildProcess::internal_grpc_address() const {
  auto it = info_.find("internal");
  return it == info_.end() ? grpc_address() : it->second;
}

std::string ChildProcess::metrics_address() const {
  auto it = info_.find("metrics");
  return it == info_.end() ? std::string() : it->second;
}

absl::Status ChildProcess::WaitHealthy(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    // In slices: a child that exits meanwhile is not waited for until the deadline.
    const absl::Time slice = std::min(deadline, absl::Now() + absl::Milliseconds(500));
    absl::Status serving = WaitForServing(grpc_address(), slice, security_);
    if (serving.ok()) return serving;
    if (!running()) {
      return absl::UnavailableError(absl::StrCat(
          "the process exited before it served (",
          WIFSIGNALED(exit_status_) ? absl::StrCat("signal ", WTERMSIG(exit_status_))
                                    : absl::StrCat("status ", WEXITSTATUS(exit_status_)),
          ")"));
    }
    if (absl::Now() >= deadline) return serving;
  }
}

bool ChildProcess::running() {
  if (reaped_) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    exit_status_ = status;
    return false;
  }
  if (r < 0 && errno == ECHILD) {
    // Reaped by someone else (a supervisor's waitpid(-1)): gone, status unknown.
    reaped_ = true;
    return false;
  }
  return true;
}

std::optional<int> ChildProcess::WaitExit(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (running()) {
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return exit_status_;
}

absl::StatusOr<int> ChildProcess::Stop(int signal, absl::Duration timeout) {
  if (!running()) return exit_status_;
  ::kill(pid_, signal);
  std::optional<int> status = WaitExit(timeout);
  if (!status.has_value()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "pid ", pid_, " still running ", absl::FormatDuration(timeout), " after signal ", signal));
  }
  return *status;
}

void ChildProcess::Kill() {
  if (!running()) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  reaped_ = true;
  exit_status_ = status;
}

std::string ChildProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace pdserve
