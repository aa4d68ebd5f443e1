// The bridge between pdserve.v1 wire types and domain types, shared by every *_service.cc
// (decode worker, prefill worker, router) so that each validates a request the same way and
// names the field and the limit in the same words.
// Thread-safety: stateless.
#ifndef PDSERVE_WIRE_REQUEST_BRIDGE_H_
#define PDSERVE_WIRE_REQUEST_BRIDGE_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "kvtransfer/kv_transport.h"
#include "pdserve/v1/common.pb.h"
#include "pdserve/v1/generation.pb.h"
#include "pdserve/v1/registry.pb.h"
#include "text/chat_template.h"
#include "text/generation_stream.h"
#include "text/sampling_config.h"
#include "text/tokenizer.h"

namespace pdserve::wire {

inline constexpr int kDefaultMaxTokens = 16;
inline constexpr size_t kMaxRequestIdBytes = 128;
inline constexpr int kMaxChatMessages = 4096;
inline constexpr size_t kMaxChatRoleBytes = 64;
inline constexpr size_t kMaxChatTemplateKwargsBytes = 65536;

// What a worker can serve; requests are validated against it.
struct ModelLimits {
  std::string model_name;
  int vocab_size = 0;
  int max_context_tokens = 0;
  // Tokens the KV pool can hold for one sequence (0: unlimited).
  int64_t max_sequence_tokens = 0;
  // Bytes of prompt text accepted before tokenizing it (0: unlimited). Checked first, so an
  // oversized prompt costs nothing but its bytes on the wire.
  int64_t max_prompt_bytes = 0;
  // The flag that sets max_prompt_bytes, named in the error.
  std::string max_prompt_bytes_flag = "--max_prompt_bytes";
};

struct ValidatedRequest {
  std::string request_id;
  std::vector<int32_t> prompt;
  text::SamplingConfig sampling;
  int priority = 0;
};

// Sampling parameters with defaults (max_tokens 16, temperature 1, top_p 1, top_k off; an
// unset seed is drawn at random). INVALID_ARGUMENT names the field and the limit.
absl::StatusOr<text::SamplingConfig> SamplingFromProto(const v1::SamplingParams& params,
                                                       int vocab_size);
// The prompt as token ids: text is tokenized (with the BOS the tokenizer's template adds),
// a chat is rendered with `chat_template` and tokenized without special tokens, ids are
// range-checked. `max_prompt_bytes` > 0 bounds the text (or the chat's messages) before
// tokenizing, and a rendered chat to that plus 64 KiB.
absl::StatusOr<std::vector<int32_t>> PromptFromProto(
    const v1::GenerateRequest& request, const text::Tokenizer* tokenizer, int vocab_size,
    const ModelLimits* limits = nullptr, const text::ChatTemplate* chat_template = nullptr);
// Bytes of prompt a request carries before tokenizing: its text, or its chat's roles,
// contents and template arguments; 0 for token ids.
int64_t PromptBytes(const v1::GenerateRequest& request);
// At most 128 bytes of printable ASCII without spaces (ids go into every log line).
absl::Status ValidateRequestId(const std::string& id);
// What the checks that cost nothing found: the request's sampling, parsed.
struct PrecheckedRequest {
  text::SamplingConfig sampling;
};
// The checks that cost nothing (model name, request id, prompt text size, sampling), for
// callers that tokenize later on another thread: they pass the result on to
// ValidatePrecheckedRequest, so that each check runs once.
absl::StatusOr<PrecheckedRequest> PrecheckGenerateRequest(const v1::GenerateRequest& request,
                                                          const ModelLimits& limits);
// The rest, after PrecheckGenerateRequest passed: the prompt (tokenized), context and pool
// limits.
absl::StatusOr<ValidatedRequest> ValidatePrecheckedRequest(
    const v1::GenerateRequest& request, const ModelLimits& limits, PrecheckedRequest prechecked,
    const text::Tokenizer* tokenizer, const text::ChatTemplate* chat_template = nullptr);
// Everything: model name, request id, prompt, sampling, context and pool limits (the two
// above, for a caller that does all on one thread).
absl::StatusOr<ValidatedRequest> ValidateGenerateRequest(
    const v1::GenerateRequest& request, const ModelLimits& limits, const text::Tokenizer* tokenizer,
    const text::ChatTemplate* chat_template = nullptr);

// absl -> gRPC, keeping code and message.
grpc::Status ToGrpc(const absl::Status& status);
// The same, and a retry-after hint on `status` (common/retry_after.h) becomes the
// "retry-after-ms" trailer on `context` (set before the call finishes), a hand-back mark
// (common/hand_back.h) the "pdserve-handed-back" one.
grpc::Status ToGrpc(const absl::Status& status, grpc::ServerContextBase* context);
absl::Status FromGrpc(const grpc::Status& status);

v1::FinishReason FinishReasonToProto(text::FinishReason reason);
v1::SamplingParams SamplingToProto(const text::SamplingConfig& config);

// KvTarget <-> the transport's descriptor + target.
void TargetToProto(const kvtransfer::TransferTarget& target, uint64_t fingerprint,
                   v1::KvTarget* out);
absl::StatusOr<kvtransfer::TransferTarget> TargetFromProto(const v1::KvTarget& target);
void LayoutToProto(const KvLayout& layout, v1::KvLayout* out);
absl::StatusOr<KvLayout> LayoutFromProto(const v1::KvLayout& layout);

// A fresh request id ("req-" + 16 hex digits).
std::string NewRequestId();

}  // namespace pdserve::wire

#endif  // PDSERVE_WIRE_REQUEST_BRIDGE_H_
