// A tiny blocking HTTP/1.0 GET for tests that scrape /metrics (no curl dependency).
// Thread-safety: stateless.
#ifndef PDSERVE_TESTS_TESTING_HTTP_CLIENT_H_
#define PDSERVE_TESTS_TESTING_HTTP_CLIENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pdserve::testing {

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GET http://<address><path>; address is host:port.
absl::StatusOr<HttpResponse> HttpGet(const std::string& address, const std::string& path,
                                     absl::Duration timeout = absl::Seconds(5));

// The value of the first /metrics line starting with `prefix` (-1 if absent or unreachable).
double Metric(const std::string& metrics_address, const std::string& prefix);
// Waits until that value is at least `min` (what a test would otherwise sleep for, e.g.
// a prefill worker having streamed some layers); false after `timeout`.
bool WaitForMetricAtLeast(const std::string& metrics_address, const std::string& prefix, double min,
                          absl::Duration timeout = absl::Seconds(10));

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_TESTING_HTTP_CLIENT_H_
