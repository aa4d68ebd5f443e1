// A decode worker's stats as the tests read them: one GetStats call (a failed call fails the
// test) and the wait for the worker to return to rest (client::AtBaseline).
#ifndef PDSERVE_TESTS_TESTING_DECODE_STATS_H_
#define PDSERVE_TESTS_TESTING_DECODE_STATS_H_

#include <string>

#include "absl/time/time.h"
#include "pdserve/v1/decode.pb.h"
#include "server/grpc_security.h"

namespace pdserve::testing {

// Decode.GetStats on the worker at `address`; a failed call is a test failure (and returns
// empty stats).
v1::DecodeStats DecodeStatsOf(const std::string& address,
                              const GrpcSecurity& security = GrpcSecurity());

// Polls until the worker is at rest (nothing running, waiting or awaiting KV; every block
// free or cached); false if it is not within `timeout`.
bool WaitForDecodeBaseline(const std::string& address, absl::Duration timeout,
                           const GrpcSecurity& security = GrpcSecurity());

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_TESTING_DECODE_STATS_H_
