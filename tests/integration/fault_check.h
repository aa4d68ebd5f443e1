// The one check after every fault scenario (the fault suite, CTest label "fault"): the
// cluster is back where it started and nothing was lost on the way.
//   - every decode worker runs and waits for nothing, and its blocks are all free or cached
//     (none in use, reserved for a transfer, or quarantined);
//   - the router relays nothing;
//   - every process is still up;
//   - no process logged a sanitizer report or a UCX assertion.
#ifndef PDSERVE_TESTS_INTEGRATION_FAULT_CHECK_H_
#define PDSERVE_TESTS_INTEGRATION_FAULT_CHECK_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "server/child_process.h"
#include "tests/router/cluster_fixture.h"

namespace pdserve::testing {

// Adds a test failure for every way `cluster` is not at baseline within `timeout`.
void ExpectClusterAtBaseline(LocalCluster& cluster, absl::Duration timeout = absl::Seconds(20));

// Adds a test failure if `process` is not running or logged a report of a sanitizer, a UCX
// assertion or a fatal error.
void ExpectProcessHealthy(ChildProcess& process, const std::string& name);

// Starts `binary` with `args`, expecting it to exit (a refused configuration): its exit code
// (-1 if it did not exit within 20 s, or was killed) and its log.
std::pair<int, std::string> RunUntilExit(const std::string& binary,
                                         const std::vector<std::string>& args);

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_INTEGRATION_FAULT_CHECK_H_
