// grpc.health.v1.Health for every pdserve server, in place of gRPC's default one:
//  - Check and Watch know the whole server ("") and each hosted service by its full name
//    (pdserve.v1.Generation, ...); an unknown name is NOT_FOUND (Check) or SERVICE_UNKNOWN
//    (Watch), as the protocol says;
//  - Shutdown() sends NOT_SERVING to every open Watch stream and then ends it, so that a
//    draining process is not held for its whole drain timeout by clients that use gRPC's
//    client-side health checking (gRPC's default service keeps Watch streams open until the
//    server's shutdown deadline cancels them).
// Thread-safety: all methods may be called from any thread.
#ifndef PDSERVE_COMMON_HEALTH_SERVICE_H_
#define PDSERVE_COMMON_HEALTH_SERVICE_H_

#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace pdserve {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  // Every name in `services` (and "") starts NOT_SERVING.
  explicit HealthService(const std::vector<std::string>& services);
  ~HealthService() override;

  // Sets every known name to SERVING or NOT_SERVING; ignored after Shutdown().
  void SetServing(bool serving);
  // NOT_SERVING for good; every Watch stream is told and then ended.
  void Shutdown();
  // Open Watch streams (tests).
  int watchers() const;

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

 private:
  class Watcher;
  // Pushes `service`'s status (or the end) to its watchers, outside the lock.
  void Publish(bool finish);
  void Remove(Watcher* watcher);
  std::string KnownNames() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, ServingStatus> statuses_ ABSL_GUARDED_BY(mu_);
  std::set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pdserve

#endif  // PDSERVE_COMMON_HEALTH_SERVICE_H_
