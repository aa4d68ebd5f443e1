#include "text/generation_stream.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pdserve::text {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

GenerationStream::GenerationStream(const Tokenizer* tokenizer, const SamplingConfig& config,
                                   std::vector<int32_t> eos_token_ids)
    : tokenizer_(tokenizer),
      config_(config),
      eos_(std::move(eos_token_ids)),
      detokenizer_(tokenizer, /*skip_special_tokens=*/true) {
  for (const std::string& s : config_.stop) max_stop_bytes_ = std::max(max_stop_bytes_, s.size());
}

size_t GenerationStream::SafeEmitEnd() const {
  if (max_stop_bytes_ <= 1) return held_.size();
  // Keep the last (longest stop - 1) bytes, moved back to a code point boundary.
  size_t end = held_.size() > max_stop_bytes_ - 1 ? held_.size() - (max_stop_bytes_ - 1) : 0;
  while (end > 0 && end < held_.size() && (static_cast<uint8_t>(held_[end]) & 0xC0) == 0x80) --end;
  return end;
}

absl::StatusOr<GenerationStream::Update> GenerationStream::Push(int32_t token) {
  Update update;
  if (finished_) return update;
  ++generated_;
  const bool is_stop_id = std::find(config_.stop_token_ids.begin(), config_.stop_token_ids.end(),
                                    token) != config_.stop_token_ids.end();
  const bool is_eos =
      !config_.ignore_eos && std::find(eos_.begin(), eos_.end(), token) != eos_.end();
  if (is_stop_id || is_eos) {
    finished_ = true;
    update.text = Finish();
    update.finish = is_stop_id ? FinishReason::kStop : FinishReason::kEos;
    if (is_stop_id) update.stop_reason = absl::StrCat(token);
    return update;
  }
  if (tokenizer_ != nullptr) {
    auto text = detokenizer_.Push(token);
    if (!text.ok()) return text.status();
    held_ += *text;
    // Earliest stop-string match wins.
    size_t best = std::string::npos;
    const std::string* matched = nullptr;
    for (const std::string& s : config_.stop) {
      const size_t at = held_.find(s);
      if (at != std::string::npos && at < best) {
        best = at;
        matched = &s;
      }
    }
    if (matched != nullptr) {
      finished_ = true;
      update.text = held_.substr(0, best);
      held_.clear();
      update.finish = FinishReason::kStop;
      update.stop_reason = *matched;
      return update;
    }
    const size_t end = SafeEmitEnd();
    update.text = held_.substr(0, end);
    held_.erase(0, end);
  }
  if (generated_ >= config_.max_tokens) {
    finished_ = true;
    update.text += Finish();
    update.finish = FinishReason::kLength;
  }
  return update;
}

std::string GenerationStream::Finish() {
  finished_ = true;
  std::string out = std::move(held_);
  held_.clear();
  if (tokenizer_ != nullptr) out += detokenizer_.Flush();
  return out;
}

}  // namespace pdserve::text
