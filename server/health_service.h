// grpc.health.v1.Health for every pdserve server, in place of gRPC's default one:
//  - Check and Watch know the whole server ("") and each hosted service by its full name
//    (pdserve.v1.Generation, ...); an unknown name is NOT_FOUND (Check) or SERVICE_UNKNOWN
//    (Watch), as the protocol says;
//  - "pdserve.live" and "pdserve.ready" answer Kubernetes' liveness and readiness probes;
//  - Shutdown() sends NOT_SERVING to every open Watch stream and then ends it, so that a
//    draining process is not held for its whole drain timeout by clients that use gRPC's
//    client-side health checking (gRPC's default service keeps Watch streams open until the
//    server's shutdown deadline cancels them).
// Thread-safety: all methods may be called from any thread.
#ifndef PDSERVE_SERVER_HEALTH_SERVICE_H_
#define PDSERVE_SERVER_HEALTH_SERVICE_H_

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

  // Probe names (Kubernetes gRPC probes name a service):
  //  - kLiveness: SERVING while the process answers at all, also while it drains or is
  //    saturated (a restart would lose every stream); a wedged process fails it by timeout.
  //  - kReadiness: SERVING while the process serves (SetServing) and its role's condition
  //    holds (SetReady: a worker registered with a router, a router with a decode worker).
  static constexpr char kLiveness[] = "pdserve.live";
  static constexpr char kReadiness[] = "pdserve.ready";

  // Every name in `services` (and "", and kReadiness) starts NOT_SERVING; kLiveness SERVING.
  explicit HealthService(const std::vector<std::string>& services);
  ~HealthService() override;

  // Sets every name but kLiveness to SERVING or NOT_SERVING (kReadiness also needs SetReady's
  // condition); ignored after Shutdown().
  void SetServing(bool serving);
  // The role's readiness condition (default true); ignored after Shutdown().
  void SetReady(bool ready);
  // NOT_SERVING for good (but kLiveness); every Watch stream is told and then ended.
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
  // Recomputes every status from serving_, ready_ and shut_down_; true if one changed.
  bool UpdateStatusesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, ServingStatus> statuses_ ABSL_GUARDED_BY(mu_);
  std::set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  bool ready_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVER_HEALTH_SERVICE_H_
