// The TCP sockets a process listens on, read from /proc (its fds matched against
// /proc/net/tcp and tcp6), for tests that check which interfaces a server binds.
// Thread-safety: stateless.
#ifndef PDSERVE_TESTS_TESTING_LISTENING_SOCKETS_H_
#define PDSERVE_TESTS_TESTING_LISTENING_SOCKETS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace pdserve::testing {

// "ip:port" of every listening TCP socket process `pid` holds, IPv6 as "[addr]:port".
std::vector<std::string> ListeningAddresses(pid_t pid);

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_TESTING_LISTENING_SOCKETS_H_
