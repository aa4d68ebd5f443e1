// The decode worker's gRPC service (callback API): Generate streams a request's tokens from
// the engine loop without a thread per stream; GetStats reports block accounting and
// counters. The only file of the decode worker that sees both protobuf and domain types.
// Thread-safety: gRPC calls it from its own threads; all state it shares is locked.
#ifndef PDSERVE_DECODE_WORKER_DECODE_SERVICE_H_
#define PDSERVE_DECODE_WORKER_DECODE_SERVICE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "decode_worker/engine_loop.h"
#include "decode_worker/prefill_client.h"
#include "pdserve/v1/decode.grpc.pb.h"
#include "wire/request_bridge.h"

namespace pdserve::decode {

class GrpcStreamSink;

// Takes over a request that names prefill workers (the offload path) with the client's
// deadline; null (no KV transport): such requests prefill locally.
using OffloadHandler = std::function<absl::Status(std::unique_ptr<Sequence>,
                                                  std::vector<PrefillTarget>, OffloadBudget)>;

struct DecodeServiceOptions {
  std::string worker_id;
  uint64_t epoch = 0;
  wire::ModelLimits limits;
  std::vector<int32_t> eos_token_ids;
};

class DecodeService final : public v1::Decode::CallbackService {
 public:
  DecodeService(EngineLoop* loop, const text::Tokenizer* tokenizer, DecodeServiceOptions options,
                Clock* clock, DecodeMetrics* metrics);

  void SetOffloadHandler(OffloadHandler handler) { offload_ = std::move(handler); }
  // The worker id is known only once the server is bound; set it before serving.
  void SetWorkerId(const std::string& id);

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::DecodeRequest* request) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const v1::GetStatsRequest* request,
                                     v1::DecodeStats* response) override;

  // Generate calls not yet done: a sequence the engine has finished may still be writing its
  // last message and status (a worker that changes role waits for them).
  int open_streams() const { return open_streams_.load(); }

  // Builds a sequence for a validated request (used by the offload path too).
  std::unique_ptr<Sequence> MakeSequence(const wire::ValidatedRequest& request, absl::Time arrival,
                                         std::shared_ptr<StreamSink> sink) const;

 private:
  EngineLoop* loop_;
  const text::Tokenizer* tokenizer_;
  DecodeServiceOptions options_;
  mutable absl::Mutex id_mu_;
  std::string worker_id_ ABSL_GUARDED_BY(id_mu_);
  Clock* clock_;
  DecodeMetrics* metrics_;
  OffloadHandler offload_;
  std::atomic<int> open_streams_{0};
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_DECODE_SERVICE_H_
