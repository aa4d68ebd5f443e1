// host:port parsing and validation for listen and peer addresses.
// Thread-safety: stateless.
#ifndef PDSERVE_COMMON_NET_ADDRESS_H_
#define PDSERVE_COMMON_NET_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pdserve {

struct HostPort {
  std::string host;  // Without brackets for IPv6 literals.
  int port = 0;      // 0 asks the OS for an ephemeral port (listen addresses only).

  // "host:port", bracketing IPv6 literals.
  std::string ToString() const;
};

// Parses "host:port", "[v6]:port" or ":port" (host empty). `field` names the flag or config
// field in error messages. Ports must be in [0, 65535].
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text, absl::string_view field);

// Whether `host` names only this machine: localhost, 127.0.0.0/8 or ::1. An empty host,
// 0.0.0.0 and :: listen on every interface and are not loopback.
bool IsLoopbackHost(absl::string_view host);

// The name of this machine's loopback network interface ("lo" on Linux); NOT_FOUND if none.
absl::StatusOr<std::string> LoopbackInterfaceName();

// A TCP port on 127.0.0.1 that was free a moment ago (for processes that need a port number
// up front, such as a Prometheus under test); another process may take it before it is used.
int PickFreeLoopbackPort();

// Returns `address` with its port replaced (e.g. a "127.0.0.1:0" listen address once bound).
std::string WithPort(const HostPort& address, int port);

}  // namespace pdserve

#endif  // PDSERVE_COMMON_NET_ADDRESS_H_
