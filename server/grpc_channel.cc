#include "server/grpc_channel.h"

#include <algorithm>

namespace pdserve {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const GrpcSecurity& security,
                                           absl::Duration keepalive) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  if (keepalive > absl::ZeroDuration()) {
    const int interval_ms = std::max<int>(kMinServerPingIntervalMs,
                                          static_cast<int>(absl::ToInt64Milliseconds(keepalive)));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, interval_ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, interval_ms / 2);
    // Ping even when this side has sent no data lately (a worker's registry stream always
    // has; the limit would otherwise stop pings after two).
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  security.AddChannelArguments(args);
  return grpc::CreateCustomChannel(address, security.ChannelCredentials(), args);
}

}  // namespace pdserve
