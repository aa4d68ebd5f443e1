#include "common/grpc_channel.h"

namespace pdserve {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const GrpcSecurity& security) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  security.AddChannelArguments(args);
  return grpc::CreateCustomChannel(address, security.ChannelCredentials(), args);
}

}  // namespace pdserve
