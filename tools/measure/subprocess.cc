#include "tools/measure/subprocess.h"

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pdserve::measure {

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::vector<std::string>& argv,
    const std::vector<std::pair<std::string, std::string>>& env) {
  int in_pipe[2], out_pipe[2];
  if (pipe(in_pipe) != 0 || pipe(out_pipe) != 0) return absl::InternalError("pipe failed");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(in_pipe[0], STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    close(in_pipe[0]);
    close(in_pipe[1]);
    close(out_pipe[0]);
    close(out_pipe[1]);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  std::unique_ptr<Subprocess> p(new Subprocess());
  p->pid_ = pid;
  p->in_fd_ = in_pipe[1];
  p->out_fd_ = out_pipe[0];
  return p;
}

Subprocess::~Subprocess() {
  if (in_fd_ >= 0) close(in_fd_);
  if (out_fd_ >= 0) close(out_fd_);
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
}

absl::Status Subprocess::WriteLine(const std::string& line) {
  const std::string data = line + "\n";
  if (write(in_fd_, data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
    return absl::UnavailableError("child stdin closed");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Subprocess::ReadLine(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration())
      return absl::DeadlineExceededError("no line from child in time");
    pollfd pfd{out_fd_, POLLIN, 0};
    const int r = poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (r <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(out_fd_, chunk, sizeof(chunk));
    if (n <= 0) return absl::UnavailableError("child closed its stdout");
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      reaped_ = true;
      return status;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError("child did not exit in time");
}

absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv,
                                       const std::vector<std::pair<std::string, std::string>>& env,
                                       absl::Duration timeout) {
  auto p = Subprocess::Start(argv, env);
  if (!p.ok()) return p.status();
  std::string out;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    auto line = (*p)->ReadLine(deadline - absl::Now());
    if (!line.ok()) {
      if (line.status().code() == absl::StatusCode::kUnavailable) break;
      return line.status();
    }
    out += *line + "\n";
  }
  auto status = (*p)->Wait(std::max(absl::Seconds(1), deadline - absl::Now()));
  if (!status.ok()) return status.status();
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return absl::InternalError(absl::StrCat(argv[0], " failed (status ", *status, "): ", out));
  }
  return out;
}

}  // namespace pdserve::measure
