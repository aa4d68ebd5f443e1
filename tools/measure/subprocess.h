// A child process with pipes on stdin and stdout (stderr is inherited), for benchmarks
// that drive a peer process line by line. The destructor kills and reaps the child.
// Thread-safety: use from one thread.
#ifndef PDSERVE_TOOLS_MEASURE_SUBPROCESS_H_
#define PDSERVE_TOOLS_MEASURE_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pdserve::measure {

class Subprocess {
 public:
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const std::vector<std::string>& argv,
      const std::vector<std::pair<std::string, std::string>>& env = {});
  ~Subprocess();

  absl::Status WriteLine(const std::string& line);
  // The next line of stdout (without the newline); DEADLINE_EXCEEDED after `timeout`,
  // UNAVAILABLE when the child closed its stdout.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);
  // Waits for exit (bounded); returns the wait status.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  pid_t pid() const { return pid_; }

 private:
  Subprocess() = default;
  pid_t pid_ = -1;
  int in_fd_ = -1;
  int out_fd_ = -1;
  std::string buffer_;
  bool reaped_ = false;
};

// Runs a command to completion (bounded) and returns its stdout.
absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv,
                                       const std::vector<std::pair<std::string, std::string>>& env,
                                       absl::Duration timeout);

}  // namespace pdserve::measure

#endif  // PDSERVE_TOOLS_MEASURE_SUBPROCESS_H_
