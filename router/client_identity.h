// Who a client is, for per-client admission (client_admission.h). In order:
//   1. a request from the router's own HTTP front: the identity the front resolved for its
//      HTTP client (carried in metadata with a per-process secret nobody else knows, since
//      the in-process call itself has no peer to speak of);
//   2. with --client_id_header NAME: that header, as set by a gateway in front of the router
//      that authenticates clients (trusted as is: set it only when every client comes through
//      such a gateway);
//   3. with TLS client certificates: the certificate's identity (its SAN or common name);
//   4. otherwise the peer's IP address (port dropped: one host's connections are one client).
// Names are bounded (a long one is replaced by its hash), so a client cannot grow the router's
// memory or metrics with what it calls itself.
// Thread-safety: pure functions.
#ifndef PDSERVE_ROUTER_CLIENT_IDENTITY_H_
#define PDSERVE_ROUTER_CLIENT_IDENTITY_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/strings/string_view.h"

namespace pdserve::router {

inline constexpr char kFrontClientHeader[] = "x-pdserve-front-client";
inline constexpr char kFrontSecretHeader[] = "x-pdserve-front-secret";
inline constexpr size_t kMaxClientNameBytes = 64;

struct ClientIdentityConfig {
  // Lower-case header (gRPC metadata or HTTP header) naming the client; empty (default): none.
  std::string header;
  // The HTTP front's secret (RandomFrontSecret(), one per process); empty: none is trusted.
  std::string front_secret;
};

// 32 random hex digits.
std::string RandomFrontSecret();

// "<kind>:<value>", with a value over kMaxClientNameBytes or holding bytes outside printable
// ASCII replaced by "#" and its hash.
std::string ClientName(absl::string_view kind, absl::string_view value);
// The client of gRPC peer string `peer` ("ipv4:10.0.0.1:5000", "ipv6:[::1]:5000",
// "unix:/path"): "addr:10.0.0.1", "addr:::1", "addr:unix"; anything else as is, bounded.
std::string ClientFromPeer(absl::string_view peer);
// The client of a call to the router's gRPC services (see the order above).
std::string ResolveClient(const grpc::ServerContextBase& context,
                          const ClientIdentityConfig& config);

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_CLIENT_IDENTITY_H_
