// One Generation.Generate call relayed to a decode worker's Decode.Generate: the router's
// placement goes down with the request, token messages come back one at a time (the next is
// read only after the client took the previous one, so a slow client is back-pressured
// rather than buffered), and the final message gets the router's timings. The client's
// deadline bounds the downstream call; the client's cancellation cancels it (the decode
// worker then cancels its prefill, if any). If the decode worker leaves the registry, or the
// router's drain runs out, the call ends with UNAVAILABLE saying why; if the worker fails or leaves
// before the first token, the request is placed once more on another decode worker. Thread-safety:
// gRPC drives it from its threads; shared state is locked.
#ifndef PDSERVE_ROUTER_RELAY_CALL_H_
#define PDSERVE_ROUTER_RELAY_CALL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pdserve/v1/decode.grpc.pb.h"
#include "router/client_admission.h"
#include "router/cost_model.h"
#include "router/placer.h"
#include "router/router_metrics.h"
#include "router/worker_registry.h"

namespace pdserve::router {

// What every relayed call shares.
struct RelayDeps {
  Placer* placer = nullptr;
  WorkerRegistry* registry = nullptr;
  CostModel* cost_model = nullptr;
  RouterMetrics* metrics = nullptr;
  // Decode worker stubs by address (channels are reused across calls).
  std::function<v1::Decode::Stub*(const std::string& address)> stub;
  std::function<void()> on_finish;  // In-flight accounting.
  // Testing: start each downstream read this much later, from another thread (widens the
  // window in which the decode worker's stream can end first; the fault suite uses it).
  // Default 0.
  absl::Duration testing_read_delay = absl::ZeroDuration();
};

// The client side is raw (ByteBuffer): the router parses requests itself, so that bytes that
// are not a GenerateRequest get INVALID_ARGUMENT rather than gRPC's bare UNIMPLEMENTED.
class RelayCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // A call for `model` that is not placed yet: gRPC gets the reactor at once, and the
  // caller answers with exactly one of Begin() or Fail() (possibly from another thread, after
  // validating and tokenizing the request off gRPC's threads). The reactor deletes itself
  // when both ends are done.
  // `client` is the request's place in its client's share, given back when the call finishes.
  static RelayCall* Create(const RelayDeps& deps, grpc::CallbackServerContext* context,
                           const CatalogModel* model, absl::Time arrival,
                           ClientAdmission::Ticket client);
  // `request` is validated (its prompt as token ids, request id set) and `prompt` is that
  // prompt. Places it and opens the downstream call (or ends with CANCELLED if the client
  // already left).
  void Begin(v1::GenerateRequest request, std::vector<int32_t> prompt,
             PlacementRequest placement_request);
  // Ends the call with `status` before anything was placed (validation, admission).
  void Fail(const absl::Status& status);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  class Downstream;
  class Listener;
  // gRPC operations decided under the lock and run after it is released: a reaction may run
  // inline from the operation that completes it, and must be able to take the lock.
  struct Actions {
    Downstream* begin = nullptr;
    v1::Decode::Stub* stub = nullptr;
    Downstream* cancel = nullptr;
    Downstream* read = nullptr;          // Read the next message (after OnMessage).
    Downstream* stop_reading = nullptr;  // Read no more (after OnMessage).
    bool write = false;
    bool finish = false;
    grpc::Status status;
    std::shared_ptr<Listener> detach;  // A placement's listener, no longer current.
  };

  RelayCall(const RelayDeps& deps, grpc::CallbackServerContext* context, const CatalogModel* model,
            absl::Time arrival, ClientAdmission::Ticket client);
  ~RelayCall() override;

  // Places the request and prepares the downstream call (or the error finish).
  void PlaceLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnMessage();  // The downstream read a message.
  void OnDownstreamDone(const grpc::Status& status);
  // The worker left, or the router stops: cancels the downstream call, which then ends the
  // call UNAVAILABLE with `message` (or, if the worker left before the first token, places it
  // again). Called with busy_ already raised.
  void OnInterrupted(const Listener* from, Interruption why, const std::string& message);
  void FinishLocked(const grpc::Status& status, Actions* actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ObserveResult(const v1::GenerateResult& result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLeaseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CANCELLED, or DEADLINE_EXCEEDED when the client's deadline is why it left.
  grpc::Status ClientGoneStatusLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Runs `actions`, then drops this thread's busy mark; the last one out of a finished call
  // deletes it.
  void Act(const Actions& actions);

  const RelayDeps deps_;
  grpc::CallbackServerContext* const context_;
  const absl::Time arrival_;

  absl::Mutex mu_;
  ClientAdmission::Ticket client_ ABSL_GUARDED_BY(mu_);
  v1::GenerateRequest request_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> prompt_ ABSL_GUARDED_BY(mu_);
  PlacementRequest placement_request_ ABSL_GUARDED_BY(mu_);
  PlacementResult placement_ ABSL_GUARDED_BY(mu_);
  bool placed_ ABSL_GUARDED_BY(mu_) = false;               // placement_ holds a placement.
  Downstream* downstream_ ABSL_GUARDED_BY(mu_) = nullptr;  // Current; owned by all_downstreams_.
  std::vector<std::unique_ptr<Downstream>> all_downstreams_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Listener> listener_ ABSL_GUARDED_BY(mu_);
  uint64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ByteBuffer out_ ABSL_GUARDED_BY(mu_);  // A serialized GenerateResponse.
  // Threads between deciding and running actions, plus one until Begin() or Fail().
  int busy_ ABSL_GUARDED_BY(mu_) = 1;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool downstream_done_ ABSL_GUARDED_BY(mu_) = true;
  bool server_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool deleting_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool deadline_passed_ ABSL_GUARDED_BY(mu_) = false;
  bool pending_finish_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status pending_status_ ABSL_GUARDED_BY(mu_);
  // Why the current placement was interrupted, if it was.
  struct Interrupt {
    Interruption why;
    std::string message;
  };
  std::optional<Interrupt> interrupted_ ABSL_GUARDED_BY(mu_);
  int messages_ ABSL_GUARDED_BY(mu_) = 0;
  int retries_ ABSL_GUARDED_BY(mu_) = 0;
  int handed_back_ ABSL_GUARDED_BY(mu_) = 0;  // Times a switching decode worker gave it back.
  double router_ms_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time first_token_ ABSL_GUARDED_BY(mu_);
  absl::Time last_token_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_RELAY_CALL_H_
