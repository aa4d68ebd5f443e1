#include "server/worker_identity_service.h"

namespace pdserve {

void WorkerIdentityService::Set(const std::string& worker_id, uint64_t epoch) {
  absl::MutexLock lock(&mu_);
  worker_id_ = worker_id;
  epoch_ = epoch;
}

grpc::ServerUnaryReactor* WorkerIdentityService::Identify(grpc::CallbackServerContext* context,
                                                          const v1::IdentifyRequest*,
                                                          v1::IdentifyResponse* response) {
  auto* reactor = context->DefaultReactor();
  {
    absl::MutexLock lock(&mu_);
    if (worker_id_.empty()) {
      reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "starting: no worker id yet"));
      return reactor;
    }
    response->set_worker_id(worker_id_);
    response->set_epoch(epoch_);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace pdserve
