#include "wire/request_bridge.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/hand_back.h"
#include "common/retry_after.h"
#include "common/status_macros.h"

namespace pdserve::wire {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

uint64_t RandomU64() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

}  // namespace

std::string NewRequestId() { return absl::StrFormat("req-%016x", RandomU64()); }

absl::StatusOr<text::SamplingConfig> SamplingFromProto(const v1::SamplingParams& p,
                                                       int vocab_size) {
  text::SamplingConfig c;
  if (p.has_max_tokens()) {
    if (p.max_tokens() <= 0)
      return Invalid("sampling.max_tokens", absl::StrCat(p.max_tokens(), " must be >= 1"));
    c.max_tokens = p.max_tokens();
  } else {
    c.max_tokens = kDefaultMaxTokens;
  }
  if (p.has_temperature()) c.temperature = p.temperature();
  if (p.has_top_p()) c.top_p = p.top_p();
  if (p.top_k() < -1)
    return Invalid("sampling.top_k",
                   absl::StrCat(p.top_k(), " must be -1 or 0 (disabled) or >= 1"));
  c.top_k = p.top_k() < 0 ? 0 : p.top_k();
  c.seed = p.has_seed() ? p.seed() : RandomU64();
  c.stop.assign(p.stop().begin(), p.stop().end());
  for (uint32_t id : p.stop_token_ids()) {
    if (id > static_cast<uint32_t>(INT32_MAX))
      return Invalid("sampling.stop_token_ids", "id too large");
    c.stop_token_ids.push_back(static_cast<int32_t>(id));
  }
  c.ignore_eos = p.ignore_eos();
  RETURN_IF_ERROR(c.Validate(vocab_size));
  return c;
}

int64_t PromptBytes(const v1::GenerateRequest& r) {
  switch (r.prompt_case()) {
    case v1::GenerateRequest::kText:
      return static_cast<int64_t>(r.text().size());
    case v1::GenerateRequest::kChat: {
      int64_t bytes = static_cast<int64_t>(r.chat().template_kwargs_json().size());
      for (const auto& m : r.chat().messages()) bytes += m.role().size() + m.content().size();
      return bytes;
    }
    default:
      return 0;
  }
}

namespace {

// The checks on a chat that cost nothing: counts and sizes.
absl::Status PrecheckChat(const v1::ChatPrompt& chat) {
  if (chat.messages_size() == 0) return Invalid("prompt.chat.messages", "must not be empty");
  if (chat.messages_size() > kMaxChatMessages) {
    return Invalid("prompt.chat.messages",
                   absl::StrCat(chat.messages_size(), " messages, at most ", kMaxChatMessages));
  }
  for (int i = 0; i < chat.messages_size(); ++i) {
    const std::string& role = chat.messages(i).role();
    if (role.empty() || role.size() > kMaxChatRoleBytes) {
      return Invalid(absl::StrCat("prompt.chat.messages[", i, "].role"),
                     absl::StrCat(role.size(), " bytes; must be 1 to ", kMaxChatRoleBytes));
    }
  }
  if (chat.template_kwargs_json().size() > kMaxChatTemplateKwargsBytes) {
    return Invalid("prompt.chat.template_kwargs_json",
                   absl::StrCat(chat.template_kwargs_json().size(), " bytes, at most ",
                                kMaxChatTemplateKwargsBytes));
  }
  return absl::OkStatus();
}

absl::Status CheckPromptBytes(const v1::GenerateRequest& r, const ModelLimits* limits) {
  if (limits == nullptr || limits->max_prompt_bytes <= 0) return absl::OkStatus();
  const int64_t bytes = PromptBytes(r);
  if (bytes <= limits->max_prompt_bytes) return absl::OkStatus();
  return Invalid(r.prompt_case() == v1::GenerateRequest::kChat ? "prompt.chat" : "prompt.text",
                 absl::StrCat(bytes, " bytes, at most ", limits->max_prompt_bytes, " (",
                              limits->max_prompt_bytes_flag, ")"));
}

absl::StatusOr<std::vector<int32_t>> ChatPromptIds(const v1::ChatPrompt& chat,
                                                   const text::Tokenizer* tokenizer,
                                                   const text::ChatTemplate* chat_template,
                                                   const ModelLimits* limits) {
  if (chat_template == nullptr || tokenizer == nullptr) {
    return Invalid("prompt.chat", "this model has no chat template; send prompt.text");
  }
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  if (!chat.template_kwargs_json().empty()) {
    kwargs = nlohmann::ordered_json::parse(chat.template_kwargs_json(), nullptr,
                                           /*allow_exceptions=*/false);
    if (kwargs.is_discarded() || !kwargs.is_object())
      return Invalid("prompt.chat.template_kwargs_json", "must be a JSON object");
  }
  for (int i = 0; i < chat.messages_size(); ++i) {
    const std::string& role = chat.messages(i).role();
    if (!chat_template->KnowsRole(role)) {
      return Invalid(absl::StrCat("prompt.chat.messages[", i, "].role"),
                     absl::StrCat("'", role,
                                  "' is neither an OpenAI API role (system, developer, user, "
                                  "assistant, tool, function) nor one this model's chat "
                                  "template names"));
    }
  }
  std::vector<text::ChatMessage> messages;
  messages.reserve(chat.messages_size());
  for (const auto& m : chat.messages()) messages.push_back({m.role(), m.content()});
  text::jinja::RenderLimits render_limits;
  if (limits != nullptr && limits->max_prompt_bytes > 0) {
    // The template adds its markup; a conversation may not grow much beyond its own bytes.
    render_limits.max_output_bytes = static_cast<size_t>(limits->max_prompt_bytes) + (64 << 10);
  }
  auto text =
      chat_template->Render(messages, /*add_generation_prompt=*/true, kwargs, render_limits);
  if (!text.ok()) return Invalid("prompt.chat", text.status().message());
  return tokenizer->Encode(*text, /*add_special_tokens=*/false);
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> PromptFromProto(const v1::GenerateRequest& r,
                                                     const text::Tokenizer* tokenizer,
                                                     int vocab_size, const ModelLimits* limits,
                                                     const text::ChatTemplate* chat_template) {
  std::vector<int32_t> ids;
  if (r.prompt_case() == v1::GenerateRequest::kChat) RETURN_IF_ERROR(PrecheckChat(r.chat()));
  RETURN_IF_ERROR(CheckPromptBytes(r, limits));
  switch (r.prompt_case()) {
    case v1::GenerateRequest::kText: {
      if (r.text().empty()) return Invalid("prompt.text", "must not be empty");
      if (tokenizer == nullptr) {
        return Invalid("prompt.text", "this model has no tokenizer; send prompt.token_ids");
      }
      ASSIGN_OR_RETURN(ids, tokenizer->Encode(r.text(), /*add_special_tokens=*/true));
      break;
    }
    case v1::GenerateRequest::kChat: {
      ASSIGN_OR_RETURN(ids, ChatPromptIds(r.chat(), tokenizer, chat_template, limits));
      break;
    }
    case v1::GenerateRequest::kTokenIds:
      for (int i = 0; i < r.token_ids().ids_size(); ++i) {
        const uint32_t id = r.token_ids().ids(i);
        if (id >= static_cast<uint32_t>(vocab_size)) {
          return Invalid(absl::StrCat("prompt.token_ids[", i, "]"),
                         absl::StrCat("token id ", id, " is outside [0, ", vocab_size, ")"));
        }
        ids.push_back(static_cast<int32_t>(id));
      }
      break;
    case v1::GenerateRequest::PROMPT_NOT_SET:
      return Invalid("prompt", "must be set (text, token_ids or chat)");
  }
  if (ids.empty()) return Invalid("prompt", "must not be empty");
  return ids;
}

absl::Status ValidateRequestId(const std::string& id) {
  if (id.size() > kMaxRequestIdBytes) {
    return Invalid("request_id", absl::StrCat(id.size(), " bytes, at most ", kMaxRequestIdBytes));
  }
  // Request ids appear in every log line about the request: control characters would let a
  // client forge log lines or drive a terminal.
  for (size_t i = 0; i < id.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(id[i]);
    if (c < 0x21 || c > 0x7e) {
      return Invalid("request_id",
                     absl::StrCat("byte ", i, " is 0x", absl::Hex(c, absl::kZeroPad2),
                                  "; only printable ASCII without spaces is allowed"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PrecheckedRequest> PrecheckGenerateRequest(const v1::GenerateRequest& r,
                                                          const ModelLimits& limits) {
  if (!r.model().empty() && r.model() != limits.model_name) {
    return absl::NotFoundError(absl::StrCat(
        "model: '", r.model(), "' is not served here (serving '", limits.model_name, "')"));
  }
  RETURN_IF_ERROR(ValidateRequestId(r.request_id()));
  if (r.prompt_case() == v1::GenerateRequest::kChat) RETURN_IF_ERROR(PrecheckChat(r.chat()));
  RETURN_IF_ERROR(CheckPromptBytes(r, &limits));
  PrecheckedRequest out;
  ASSIGN_OR_RETURN(out.sampling, SamplingFromProto(r.sampling(), limits.vocab_size));
  return out;
}

absl::StatusOr<ValidatedRequest> ValidateGenerateRequest(const v1::GenerateRequest& r,
                                                         const ModelLimits& limits,
                                                         const text::Tokenizer* tokenizer,
                                                         const text::ChatTemplate* chat_template) {
  ASSIGN_OR_RETURN(PrecheckedRequest prechecked, PrecheckGenerateRequest(r, limits));
  return ValidatePrecheckedRequest(r, limits, std::move(prechecked), tokenizer, chat_template);
}

absl::StatusOr<ValidatedRequest> ValidatePrecheckedRequest(
    const v1::GenerateRequest& r, const ModelLimits& limits, PrecheckedRequest prechecked,
    const text::Tokenizer* tokenizer, const text::ChatTemplate* chat_template) {
  ValidatedRequest out;
  out.request_id = r.request_id().empty() ? NewRequestId() : r.request_id();
  out.sampling = std::move(prechecked.sampling);
  ASSIGN_OR_RETURN(out.prompt,
                   PromptFromProto(r, tokenizer, limits.vocab_size, &limits, chat_template));
  if (!r.sampling().has_max_tokens() && r.sampling().max_tokens_to_context()) {
    const int64_t room = limits.max_context_tokens - static_cast<int64_t>(out.prompt.size());
    if (room < 1) {
      return Invalid("prompt", absl::StrCat(out.prompt.size(),
                                            " tokens leave no room in the model's context of ",
                                            limits.max_context_tokens, " tokens"));
    }
    out.sampling.max_tokens = static_cast<int>(room);
  }
  const int64_t total = static_cast<int64_t>(out.prompt.size()) + out.sampling.max_tokens;
  if (total > limits.max_context_tokens) {
    return Invalid("sampling.max_tokens",
                   absl::StrCat("prompt (", out.prompt.size(), " tokens) + max_tokens (",
                                out.sampling.max_tokens, ") exceeds the model's context of ",
                                limits.max_context_tokens, " tokens"));
  }
  if (limits.max_sequence_tokens > 0 &&
      static_cast<int64_t>(out.prompt.size()) + 1 > limits.max_sequence_tokens) {
    return Invalid("prompt", absl::StrCat(out.prompt.size(),
                                          " tokens need more KV than this worker's pool holds (",
                                          limits.max_sequence_tokens, " tokens)"));
  }
  if (limits.max_sequence_tokens > 0 && total > limits.max_sequence_tokens) {
    return Invalid("sampling.max_tokens",
                   absl::StrCat("prompt (", out.prompt.size(), " tokens) + max_tokens (",
                                out.sampling.max_tokens, ") exceeds the ",
                                limits.max_sequence_tokens, " tokens this worker's KV pool holds"));
  }
  out.priority = r.priority();
  return out;
}

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

grpc::Status ToGrpc(const absl::Status& s, grpc::ServerContextBase* context) {
  if (const std::optional<absl::Duration> hint = RetryAfter(s);
      hint.has_value() && context != nullptr) {
    context->AddTrailingMetadata(kRetryAfterTrailer,
                                 absl::StrCat(absl::ToInt64Milliseconds(*hint)));
  }
  if (IsHandedBack(s) && context != nullptr) context->AddTrailingMetadata(kHandedBackTrailer, "1");
  return ToGrpc(s);
}

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

v1::FinishReason FinishReasonToProto(text::FinishReason r) {
  switch (r) {
    case text::FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case text::FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case text::FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case text::FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case text::FinishReason::kError:
      return v1::FINISH_REASON_ERROR;
    case text::FinishReason::kNone:
      return v1::FINISH_REASON_UNSPECIFIED;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

v1::SamplingParams SamplingToProto(const text::SamplingConfig& c) {
  v1::SamplingParams p;
  p.set_max_tokens(c.max_tokens);
  p.set_temperature(c.temperature);
  p.set_top_p(c.top_p);
  p.set_top_k(c.top_k);
  p.set_seed(c.seed);
  for (const auto& s : c.stop) p.add_stop(s);
  for (int32_t id : c.stop_token_ids) p.add_stop_token_ids(static_cast<uint32_t>(id));
  p.set_ignore_eos(c.ignore_eos);
  return p;
}

void LayoutToProto(const KvLayout& l, v1::KvLayout* out) {
  out->set_num_layers(l.num_layers);
  out->set_num_kv_heads(l.num_kv_heads);
  out->set_head_dim(l.head_dim);
  out->set_block_size(l.block_size);
  out->set_dtype(static_cast<v1::DType>(static_cast<int>(l.dtype)));
  out->set_num_blocks(l.num_blocks);
}

absl::StatusOr<KvLayout> LayoutFromProto(const v1::KvLayout& p) {
  if (p.dtype() < v1::DTYPE_F32 || p.dtype() > v1::DTYPE_BF16)
    return Invalid("kv_layout.dtype", "unknown dtype");
  KvLayout l;
  l.num_layers = static_cast<int>(p.num_layers());
  l.num_kv_heads = static_cast<int>(p.num_kv_heads());
  l.head_dim = static_cast<int>(p.head_dim());
  l.block_size = static_cast<int>(p.block_size());
  l.dtype = static_cast<DType>(static_cast<int>(p.dtype()));
  l.num_blocks = static_cast<int>(p.num_blocks());
  if (absl::Status s = l.Validate(); !s.ok()) return Invalid("kv_layout", s.message());
  return l;
}

void TargetToProto(const kvtransfer::TransferTarget& t, uint64_t fingerprint, v1::KvTarget* out) {
  out->set_receiver_id(t.pool.receiver_id);
  out->set_ucx_worker_address(t.pool.worker_address);
  out->set_packed_rkey(t.pool.packed_rkey);
  out->set_pool_base_address(t.pool.base_address);
  LayoutToProto(t.pool.layout, out->mutable_layout());
  for (int32_t b : t.block_ids) out->add_block_ids(static_cast<uint32_t>(b));
  out->set_model_fingerprint(fingerprint);
  out->set_transfer_token(t.token);
  out->set_epoch(t.pool.epoch);
}

absl::StatusOr<kvtransfer::TransferTarget> TargetFromProto(const v1::KvTarget& p) {
  kvtransfer::TransferTarget t;
  t.pool.receiver_id = p.receiver_id();
  t.pool.worker_address = p.ucx_worker_address();
  t.pool.packed_rkey = p.packed_rkey();
  t.pool.base_address = p.pool_base_address();
  ASSIGN_OR_RETURN(t.pool.layout, LayoutFromProto(p.layout()));
  t.pool.model_fingerprint = p.model_fingerprint();
  t.pool.epoch = p.epoch();
  t.token = p.transfer_token();
  for (uint32_t b : p.block_ids()) t.block_ids.push_back(static_cast<int32_t>(b));
  if (t.block_ids.empty()) return Invalid("target.block_ids", "must not be empty");
  if (t.pool.worker_address.empty())
    return Invalid("target.ucx_worker_address", "must not be empty");
  return t;
}

}  // namespace pdserve::wire
