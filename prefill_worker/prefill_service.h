// The prefill worker's gRPC service (callback API): Prefill queues a job on the batcher and
// answers when its KV is at the decode worker and its first token is sampled; CancelPrefill
// stops a job and answers once it can write nothing more. The only file of the prefill worker
// that sees both protobuf and domain types.
// Thread-safety: called from gRPC threads.
#ifndef PDSERVE_PREFILL_WORKER_PREFILL_SERVICE_H_
#define PDSERVE_PREFILL_WORKER_PREFILL_SERVICE_H_

#include <string>

#include "absl/synchronization/mutex.h"
#include "pdserve/v1/prefill.grpc.pb.h"
#include "prefill_worker/prefill_batcher.h"

namespace pdserve::prefill {

// Checks a Prefill request and builds its job (without the completion callback).
// INVALID_ARGUMENT names the field and the limit. Pure: the fuzz target calls it.
absl::StatusOr<std::unique_ptr<PrefillJob>> JobFromRequest(const v1::PrefillRequest& request,
                                                           int vocab_size, absl::Time deadline);

class PrefillService final : public v1::Prefill::CallbackService {
 public:
  PrefillService(PrefillBatcher* batcher, int vocab_size, uint64_t epoch);
  void SetWorkerId(const std::string& id);

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* context,
                                    const v1::PrefillRequest* request,
                                    v1::PrefillResponse* response) override;
  grpc::ServerUnaryReactor* CancelPrefill(grpc::CallbackServerContext* context,
                                          const v1::CancelPrefillRequest* request,
                                          v1::CancelPrefillResponse* response) override;

 private:
  std::string worker_id() const;
  PrefillBatcher* batcher_;
  int vocab_size_;
  uint64_t epoch_;
  mutable absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::prefill

#endif  // PDSERVE_PREFILL_WORKER_PREFILL_SERVICE_H_
