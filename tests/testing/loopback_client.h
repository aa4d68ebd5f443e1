// Raw TCP clients of a server on 127.0.0.1, for tests of listeners (idle connections, floods,
// partial requests).
// Thread-safety: stateless.
#ifndef PDSERVE_TESTS_TESTING_LOOPBACK_CLIENT_H_
#define PDSERVE_TESTS_TESTING_LOOPBACK_CLIENT_H_

#include <string>

namespace pdserve::testing {

// A connected TCP socket to 127.0.0.1:`port` that has sent `partial` (if any); -1 when the
// connection could not be made within a second. The caller closes it.
int ConnectLoopback(int port, const std::string& partial = "");

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_TESTING_LOOPBACK_CLIENT_H_
