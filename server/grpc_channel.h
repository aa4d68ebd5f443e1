// The one recipe for a gRPC client channel in pdserve (router -> workers, workers -> router,
// decode -> prefill, tools and benchmarks -> router). Keeping it in one place means a channel
// setting (message size limits, credentials) cannot differ between links by accident.
// Thread-safety: reentrant; the returned channel may be shared by any number of threads.
#ifndef PDSERVE_SERVER_GRPC_CHANNEL_H_
#define PDSERVE_SERVER_GRPC_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "server/grpc_security.h"

namespace pdserve {

// Largest message a pdserve channel receives: a GenerateResponse or a registry message with a
// long prefix-cache event list stays far below it; gRPC's 4 MiB default does not.
inline constexpr int kMaxReceiveMessageBytes = 64 << 20;

// Pings a pdserve server accepts from a client at most this often (every server sets it); a
// client's keepalive interval must not be shorter, or the server ends its connection.
inline constexpr int kMinServerPingIntervalMs = 5000;

// A channel to `address` (host:port) with pdserve's channel arguments, secured as `security`
// says (GrpcSecurity() is plaintext). With `keepalive` > 0 (at least
// kMinServerPingIntervalMs), the channel pings the server that often while a call is open and
// gives the connection up when a ping goes unanswered for half that: a peer cut off by the
// network (no FIN, no RST) is then noticed in seconds, not when TCP gives up.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const GrpcSecurity& security,
                                           absl::Duration keepalive = absl::ZeroDuration());

}  // namespace pdserve

#endif  // PDSERVE_SERVER_GRPC_CHANNEL_H_
