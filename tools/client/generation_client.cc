#include "tools/client/generation_client.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/retry_after.h"
#include "wire/request_bridge.h"

namespace pdserve::client {

void CallHandle::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

bool CallHandle::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

// Ties a context to a handle for the context's lifetime.
class CallAttachment {
 public:
  CallAttachment(CallHandle* handle, grpc::ClientContext* context) : handle_(handle) {
    if (handle_ == nullptr) return;
    absl::MutexLock lock(&handle_->mu_);
    handle_->context_ = context;
    if (handle_->cancelled_) context->TryCancel();
  }
  ~CallAttachment() {
    if (handle_ == nullptr) return;
    absl::MutexLock lock(&handle_->mu_);
    handle_->context_ = nullptr;
  }

 private:
  CallHandle* handle_;
};

namespace {

template <typename Reader>
GenerationOutcome Collect(std::unique_ptr<Reader> reader, grpc::ClientContext* context,
                          absl::Time start, const MessageCallback& on_message) {
  GenerationOutcome out;
  out.start = start;
  v1::GenerateResponse message;
  while (reader->Read(&message)) {
    if (message.token_ids_size() > 0) {
      out.token_times.push_back(absl::Now());
      out.tokens_per_message.push_back(message.token_ids_size());
    }
    for (uint32_t id : message.token_ids()) out.tokens.push_back(static_cast<int32_t>(id));
    out.text += message.text();
    if (message.has_result()) {
      out.result = message.result();
      out.has_result = true;
    }
    if (on_message) on_message(message);
  }
  out.status = reader->Finish();
  const auto& trailers = context->GetServerTrailingMetadata();
  if (auto it = trailers.find(kRetryAfterTrailer); it != trailers.end()) {
    out.retry_after = ParseRetryAfterTrailer(std::string(it->second.data(), it->second.size()));
  }
  return out;
}

// One server-streaming Generate call on `Service` (Decode or Generation: the same stream of
// GenerateResponse messages), run to its end.
template <typename Service, typename Request>
GenerationOutcome CallStreaming(const std::shared_ptr<grpc::Channel>& channel,
                                const Request& request, absl::Duration timeout,
                                const MessageCallback& on_message, CallHandle* handle) {
  auto stub = Service::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  CallAttachment attached(handle, &context);
  const absl::Time start = absl::Now();
  return Collect(stub->Generate(&context, request), &context, start, on_message);
}

}  // namespace

GenerationOutcome CallDecode(const std::shared_ptr<grpc::Channel>& channel,
                             const v1::DecodeRequest& request, absl::Duration timeout,
                             const MessageCallback& on_message, CallHandle* handle) {
  return CallStreaming<v1::Decode>(channel, request, timeout, on_message, handle);
}

GenerationOutcome CallGenerate(const std::shared_ptr<grpc::Channel>& channel,
                               const v1::GenerateRequest& request, absl::Duration timeout,
                               const MessageCallback& on_message, CallHandle* handle) {
  return CallStreaming<v1::Generation>(channel, request, timeout, on_message, handle);
}

absl::StatusOr<v1::DecodeStats> FetchDecodeStats(const std::shared_ptr<grpc::Channel>& channel,
                                                 absl::Duration timeout) {
  auto stub = v1::Decode::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::DecodeStats stats;
  const grpc::Status status = stub->GetStats(&context, v1::GetStatsRequest(), &stats);
  if (!status.ok()) {
    // The worker's own code (DEADLINE_EXCEEDED, UNAVAILABLE, UNAUTHENTICATED...) is kept: a
    // caller polling for a worker tells "not up yet" from "refused" by it.
    return absl::Status(wire::FromGrpc(status).code(),
                        absl::StrCat("Decode.GetStats: ", status.error_message()));
  }
  return stats;
}

bool AtBaseline(const v1::DecodeStats& s) {
  return s.running() == 0 && s.waiting() == 0 && s.awaiting_kv() == 0 && s.blocks().in_use() == 0 &&
         s.blocks().reserved_for_transfer() == 0 && s.blocks().quarantined() == 0 &&
         s.blocks().free() + s.blocks().cached() == s.blocks().total();
}

GenerationOutcome CallGenerateCancellingAfter(const std::shared_ptr<grpc::Channel>& channel,
                                              const v1::GenerateRequest& request,
                                              absl::Duration timeout, absl::Duration cancel_after,
                                              bool* cancelled) {
  CallHandle handle;
  absl::Notification done;
  std::thread canceller([&] {
    if (!done.WaitForNotificationWithTimeout(cancel_after)) handle.Cancel();
  });
  GenerationOutcome out = CallGenerate(channel, request, timeout, nullptr, &handle);
  done.Notify();
  canceller.join();
  *cancelled = handle.cancelled();
  return out;
}

v1::GenerateRequest MakeRequest(const std::vector<int32_t>& tokens, int max_tokens,
                                float temperature, const std::string& text) {
  v1::GenerateRequest r;
  if (tokens.empty()) {
    r.set_text(text);
  } else {
    for (int32_t t : tokens) r.mutable_token_ids()->add_ids(static_cast<uint32_t>(t));
  }
  r.mutable_sampling()->set_max_tokens(max_tokens);
  r.mutable_sampling()->set_temperature(temperature);
  return r;
}

}  // namespace pdserve::client
