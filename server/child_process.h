// RAII handle for a pdserve server process started by another process (tests, benchmarks,
// pdctl): typically on 127.0.0.1 with an ephemeral port. The child gets
// --serving_info_path=<file> and the handle waits for that file to learn the real addresses.
// The destructor always stops the child (SIGTERM, then SIGKILL after a grace period), and the
// child dies with its parent (PR_SET_PDEATHSIG) if the parent crashes.
// Thread-safety: use from one thread.
#ifndef PDSERVE_SERVER_CHILD_PROCESS_H_
#define PDSERVE_SERVER_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/serving_info.h"
#include "server/grpc_security.h"

namespace pdserve {

struct ChildOptions {
  // Path of the binary; a bare name is looked up beside the running executable.
  std::string binary;
  std::vector<std::string> args;
  // Extra environment variables (NAME, value) on top of the test's environment.
  std::vector<std::pair<std::string, std::string>> env;
  // Adds --serving_info_path and waits for it in Start(). Off for plain commands.
  bool expect_serving_info = true;
  // How long Start() waits for the serving info file.
  absl::Duration startup_timeout = absl::Seconds(60);
  // Where the child's stdout+stderr and serving info go; empty: a temporary directory that
  // the handle removes. A given directory is kept (pdctl's run directory).
  std::string run_dir;
  // Base name of the log and serving-info files in run_dir. Default "child".
  std::string name = "child";
  // Detached: the child gets its own session and does not die with the parent; Release()
  // then lets the handle go without stopping it (pdctl up).
  bool detached = false;
  // CPUs the child may run on (sched_setaffinity); empty: no pinning.
  std::vector<int> cpus;
  // Scheduling niceness added to the child's (setpriority; 0..19). A prefill worker sharing
  // cores with latency-critical processes runs niced so that their short wake-ups preempt
  // its long forwards rather than the decode worker's steps.
  int nice = 0;
  // RLIMIT_NOFILE (soft and hard) of the child; 0: inherited. Tests of descriptor exhaustion.
  int64_t max_open_files = 0;
  // How WaitHealthy() reaches the child's gRPC listener (a TLS child needs TLS).
  GrpcSecurity security;
};

class ChildProcess {
 public:
  // Starts the child; with expect_serving_info, returns once the child wrote its addresses.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(ChildOptions options);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  const ServingInfo& serving_info() const { return info_; }
  // The child's gRPC address ("grpc" in the serving info).
  std::string grpc_address() const;
  // Its internal listener ("internal": the router's registry), else its gRPC address.
  std::string internal_grpc_address() const;
  std::string metrics_address() const;

  // Waits for grpc.health SERVING.
  absl::Status WaitHealthy(absl::Duration timeout);
  // Sends `signal` and waits for exit; returns the raw wait status (use WIFEXITED etc).
  absl::StatusOr<int> Stop(int signal, absl::Duration timeout);
  // SIGKILL and reap.
  void Kill();
  // Forgets the child: the destructor no longer stops it (it keeps running). Returns its pid.
  pid_t Release();
  // Waits for exit without signalling; nullopt on timeout.
  std::optional<int> WaitExit(absl::Duration timeout);
  bool running();
  // The child's combined stdout+stderr so far.
  std::string Log() const;
  const std::string& log_path() const { return log_path_; }

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int exit_status_ = 0;
  std::string dir_;
  bool owns_dir_ = false;
  std::string log_path_;
  std::string info_path_;
  ServingInfo info_;
  GrpcSecurity security_;
};

// Path of a pdserve binary: `name` itself if it has a '/', else the file of that name in the
// directory of the running executable (every pdserve binary, test and benchmark is built
// into one bin directory, and installed into one).
std::string BinaryPath(const std::string& name);

}  // namespace pdserve

#endif  // PDSERVE_SERVER_CHILD_PROCESS_H_
