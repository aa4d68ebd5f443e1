// The one recipe for a gRPC client channel in pdserve (router -> workers, workers -> router,
// decode -> prefill, tools and benchmarks -> router). Keeping it in one place means a channel
// setting (message size limits, credentials) cannot differ between links by accident.
// Thread-safety: reentrant; the returned channel may be shared by any number of threads.
#ifndef PDSERVE_COMMON_GRPC_CHANNEL_H_
#define PDSERVE_COMMON_GRPC_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/grpc_security.h"

namespace pdserve {

// Largest message a pdserve channel receives: a GenerateResponse or a registry message with a
// long prefix-cache event list stays far below it; gRPC's 4 MiB default does not.
inline constexpr int kMaxReceiveMessageBytes = 64 << 20;

// A channel to `address` (host:port) with pdserve's channel arguments, secured as `security`
// says (GrpcSecurity() is plaintext).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const GrpcSecurity& security);

}  // namespace pdserve

#endif  // PDSERVE_COMMON_GRPC_CHANNEL_H_
