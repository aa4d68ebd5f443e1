// PrefillClient over gRPC: pdserve.v1.Prefill (Prefill, CancelPrefill) and grpc.health.v1
// (liveness), with one channel per prefill worker address, kept for the process's lifetime.
// Proto conversion happens here and nowhere else on the decode worker's offload path.
// Thread-safety: safe from any thread. Destruction waits (bounded) for calls in flight.
#ifndef PDSERVE_DECODE_WORKER_GRPC_PREFILL_CLIENT_H_
#define PDSERVE_DECODE_WORKER_GRPC_PREFILL_CLIENT_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "decode_worker/prefill_client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "pdserve/v1/prefill.grpc.pb.h"
#include "server/grpc_security.h"

namespace pdserve::decode {

class GrpcPrefillClient final : public PrefillClient {
 public:
  // Channels to prefill workers are secured as `security` says.
  explicit GrpcPrefillClient(GrpcSecurity security) : security_(std::move(security)) {}
  // Cancels the calls in flight and waits up to 10 s for their callbacks.
  ~GrpcPrefillClient() override;

  std::shared_ptr<PendingCall> Prefill(const PrefillTarget& target, const PrefillJob& job,
                                       PrefillDone done) override;
  std::shared_ptr<PendingCall> CancelPrefill(const PrefillTarget& target, uint64_t transfer_token,
                                             absl::Time deadline, CancelDone done) override;
  std::shared_ptr<PendingCall> CheckAlive(const PrefillTarget& target, absl::Time deadline,
                                          AliveDone done) override;

 private:
  struct Stubs {
    std::unique_ptr<v1::Prefill::Stub> prefill;
    std::unique_ptr<grpc::health::v1::Health::Stub> health;
  };
  struct StubPointers {
    v1::Prefill::Stub* prefill;
    grpc::health::v1::Health::Stub* health;
  };
  class Call;
  // The stubs of `address`, created on first use.
  StubPointers StubsFor(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);
  void Track(const std::shared_ptr<Call>& call) ABSL_LOCKS_EXCLUDED(mu_);
  void Untrack(const Call* call) ABSL_LOCKS_EXCLUDED(mu_);

  const GrpcSecurity security_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Stubs> stubs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const Call*, std::weak_ptr<Call>> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_GRPC_PREFILL_CLIENT_H_
