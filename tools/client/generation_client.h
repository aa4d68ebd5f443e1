// Client helpers for pdserve's streaming Generate calls (router Generation service and
// decode worker Decode service): run one call to the end and collect tokens, text, the final
// result and client-side timings. Used by pdctl, the benchmarks and the tests.
// Thread-safety: functions are reentrant; channels may be shared.
#ifndef PDSERVE_TOOLS_CLIENT_GENERATION_CLIENT_H_
#define PDSERVE_TOOLS_CLIENT_GENERATION_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pdserve/v1/decode.grpc.pb.h"
#include "pdserve/v1/generation.grpc.pb.h"
#include "server/grpc_channel.h"

namespace pdserve::client {

struct GenerationOutcome {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  v1::GenerateResult result;
  bool has_result = false;
  // Client-side arrival time of every message carrying tokens, and the start of the call.
  absl::Time start;
  std::vector<absl::Time> token_times;
  std::vector<int> tokens_per_message;
  // The server's retry-after hint ("retry-after-ms" trailer), with RESOURCE_EXHAUSTED.
  std::optional<absl::Duration> retry_after;
};

using MessageCallback = std::function<void(const v1::GenerateResponse&)>;

// Cancels a call from another thread, whenever: before it starts (it then fails at once
// with CANCELLED), while it runs, or after it ended (nothing happens). The call's context
// lives inside the Call* function; this handle is the only safe way to reach it.
class CallHandle {
 public:
  void Cancel();
  bool cancelled() const;

 private:
  friend class CallAttachment;
  mutable absl::Mutex mu_;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

using ::pdserve::MakeChannel;  // The one channel recipe (server/grpc_channel.h).

// Decode.Generate on a decode worker. `handle`, if set, can cancel it from another thread.
GenerationOutcome CallDecode(const std::shared_ptr<grpc::Channel>& channel,
                             const v1::DecodeRequest& request, absl::Duration timeout,
                             const MessageCallback& on_message = nullptr,
                             CallHandle* handle = nullptr);
// Generation.Generate on a router.
GenerationOutcome CallGenerate(const std::shared_ptr<grpc::Channel>& channel,
                               const v1::GenerateRequest& request, absl::Duration timeout,
                               const MessageCallback& on_message = nullptr,
                               CallHandle* handle = nullptr);

// Decode.GetStats on a decode worker: its sequences and blocks. UNAVAILABLE, with gRPC's
// message, when the call fails.
absl::StatusOr<v1::DecodeStats> FetchDecodeStats(const std::shared_ptr<grpc::Channel>& channel,
                                                 absl::Duration timeout = absl::Seconds(5));
// A decode worker at rest: nothing running, waiting or awaiting KV, and every block free or
// cached (none in use, reserved for a transfer or quarantined): what it must return to after
// any request, failed or not.
bool AtBaseline(const v1::DecodeStats& stats);

// CallGenerate, cancelled by the client after `cancel_after` if still running (as a user who
// gives up would); `*cancelled` says whether the cancellation was sent.
GenerationOutcome CallGenerateCancellingAfter(const std::shared_ptr<grpc::Channel>& channel,
                                              const v1::GenerateRequest& request,
                                              absl::Duration timeout, absl::Duration cancel_after,
                                              bool* cancelled);

// A request for `tokens` (or `text` when tokens is empty) with greedy sampling by default.
v1::GenerateRequest MakeRequest(const std::vector<int32_t>& tokens, int max_tokens,
                                float temperature = 0.0f, const std::string& text = "");

}  // namespace pdserve::client

#endif  // PDSERVE_TOOLS_CLIENT_GENERATION_CLIENT_H_
