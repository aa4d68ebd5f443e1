// WorkerIdentity.Identify (registry.proto): the worker id and epoch of the process serving at
// this address, set once the address (and so the default id) is known. Before that, and for a
// worker id the process no longer holds, it answers UNAVAILABLE.
// Thread-safety: Set from any thread; gRPC calls from its threads.
#ifndef PDSERVE_SERVER_WORKER_IDENTITY_SERVICE_H_
#define PDSERVE_SERVER_WORKER_IDENTITY_SERVICE_H_

#include <cstdint>
#include <string>

#include "absl/synchronization/mutex.h"
#include "pdserve/v1/registry.grpc.pb.h"

namespace pdserve {

class WorkerIdentityService final : public v1::WorkerIdentity::CallbackService {
 public:
  void Set(const std::string& worker_id, uint64_t epoch);

  grpc::ServerUnaryReactor* Identify(grpc::CallbackServerContext* context,
                                     const v1::IdentifyRequest* request,
                                     v1::IdentifyResponse* response) override;

 private:
  absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVER_WORKER_IDENTITY_SERVICE_H_
