// The port through which a decode worker's offload coordinator talks to prefill workers, in
// domain types: run a prefill that writes its KV into this worker's pool, ask a worker to stop
// writing a transfer, check that a worker is alive. The product implementation is gRPC
// (grpc_prefill_client.h); unit tests drive the coordinator through a fake.
// Thread-safety: implementations are safe from any thread. Every `done` callback runs exactly
// once, on a thread of the implementation's choosing (never inside the call that started it).
#ifndef PDSERVE_DECODE_WORKER_PREFILL_CLIENT_H_
#define PDSERVE_DECODE_WORKER_PREFILL_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/worker_reports.h"
#include "kvtransfer/kv_transport.h"
#include "text/sampling_config.h"

namespace pdserve::decode {

// A prefill worker a request may be offloaded to (the router's choice, in its order).
struct PrefillTarget {
  std::string worker_id;
  std::string address;  // host:port of its Prefill service.
};

// The time an offloaded prefill may take, from the request: its deadline (the client's), its
// TTFT objective and the router's predicted offload time. An attempt that runs past
// max(ttft_deadline, admission + 2 x predicted) is abandoned for the next target or local
// prefill, which still gives the first token within the objective plus the local prefill
// time; a prefill worker alive but too slow no longer holds the request for the attempt
// timeout (60 s) and then its deadline.
struct OffloadBudget {
  absl::Time deadline = absl::InfiniteFuture();
  // Arrival + the TTFT objective; InfiniteFuture when the request has none.
  absl::Time ttft_deadline = absl::InfiniteFuture();
  // The router's predicted offload time (queue, prefill and transfer); zero: unknown.
  absl::Duration predicted = absl::ZeroDuration();
};

// One offloaded prefill: the whole prompt; KV for positions [first_position,
// first_position + num_tokens) goes into `target`'s blocks.
struct PrefillJob {
  std::string request_id;
  std::vector<int32_t> prompt;
  text::SamplingConfig sampling;
  kvtransfer::TransferTarget target;
  uint64_t model_fingerprint = 0;
  int first_position = 0;
  int num_tokens = 0;
  // The worker stops computing and writing at this time.
  absl::Time deadline;
  // When the request's TTFT objective falls due (InfiniteFuture: it has none); the prefill
  // worker computes its queue in this order.
  absl::Time ttft_due = absl::InfiniteFuture();
};

// A prefill worker's answer once the prompt is computed and its KV sent.
struct PrefillResult {
  int32_t first_token = 0;
  std::string worker_id;
  PrefillMeasurement measured;
};

// A call in flight; Cancel() ends it early (its `done` then reports CANCELLED, unless it had
// already finished). Safe to call at any time, also after the call ended.
class PendingCall {
 public:
  virtual ~PendingCall() = default;
  virtual void Cancel() = 0;
};

class PrefillClient {
 public:
  using PrefillDone = std::function<void(absl::StatusOr<PrefillResult>)>;
  // OK(true): the worker stopped writing the transfer (or never had it).
  using CancelDone = std::function<void(absl::StatusOr<bool> writes_stopped)>;
  using AliveDone = std::function<void(absl::Status)>;

  virtual ~PrefillClient() = default;

  // Errors keep the worker's status code: FAILED_PRECONDITION, INVALID_ARGUMENT,
  // RESOURCE_EXHAUSTED and UNIMPLEMENTED mean it refused before writing anything;
  // UNAVAILABLE that it could not be reached.
  virtual std::shared_ptr<PendingCall> Prefill(const PrefillTarget& target, const PrefillJob& job,
                                               PrefillDone done) = 0;
  virtual std::shared_ptr<PendingCall> CancelPrefill(const PrefillTarget& target,
                                                     uint64_t transfer_token, absl::Time deadline,
                                                     CancelDone done) = 0;
  // OK when the worker answers its health check (serving or draining) by `deadline`.
  virtual std::shared_ptr<PendingCall> CheckAlive(const PrefillTarget& target, absl::Time deadline,
                                                  AliveDone done) = 0;
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_PREFILL_CLIENT_H_
