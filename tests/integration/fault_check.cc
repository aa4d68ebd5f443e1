#include "tests/integration/fault_check.h"

#include <sys/wait.h>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace pdserve::testing {
namespace {

// Lines any of our processes print only when something is badly wrong.
constexpr const char* kReports[] = {
    "ERROR: AddressSanitizer",  "ERROR: LeakSanitizer", "runtime error:",
    "WARNING: ThreadSanitizer", "Assertion `",          "pure virtual method called",
    "terminate called",         "Check failed:",        "] Fatal: ",
    "assertion failed:",
};

}  // namespace

void ExpectProcessHealthy(ChildProcess& process, const std::string& name) {
  const std::string log = process.Log();
  EXPECT_TRUE(process.running()) << name << " is not running; log:\n" << log;
  for (const char* report : kReports) {
    EXPECT_FALSE(absl::StrContains(log, report)) << name << " logged '" << report << "':\n" << log;
  }
}

std::pair<int, std::string> RunUntilExit(const std::string& binary,
                                         const std::vector<std::string>& args) {
  auto child = ChildProcess::Start(
      ChildOptions{.binary = binary, .args = args, .expect_serving_info = false});
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return {-1, ""};
  auto status = (*child)->WaitExit(absl::Seconds(20));
  EXPECT_TRUE(status.has_value()) << "still running\n" << (*child)->Log();
  const int code = status.has_value() && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  return {code, (*child)->Log()};
}

void ExpectClusterAtBaseline(LocalCluster& cluster, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  ExpectProcessHealthy(cluster.router(), "router");
  for (size_t i = 0; i < cluster.prefill().size(); ++i) {
    if (cluster.prefill()[i])
      ExpectProcessHealthy(*cluster.prefill()[i], "prefill-" + std::to_string(i));
  }
  for (size_t i = 0; i < cluster.decode().size(); ++i) {
    if (!cluster.decode()[i]) continue;
    ChildProcess& worker = *cluster.decode()[i];
    ExpectProcessHealthy(worker, "decode-" + std::to_string(i));
    if (!worker.running()) continue;
    EXPECT_TRUE(
        LocalCluster::WaitForBaseline(worker, std::max(deadline - absl::Now(), absl::Seconds(1))))
        << "decode-" << i
        << " not at baseline: " << LocalCluster::DecodeStats(worker).DebugString();
  }
  if (!cluster.router().running()) return;
  uint32_t in_flight = 0;
  do {
    in_flight = cluster.Status().in_flight();
    if (in_flight == 0) break;
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < deadline);
  EXPECT_EQ(in_flight, 0u) << "the router still relays requests";
}

}  // namespace pdserve::testing
