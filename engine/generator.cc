#include "engine/generator.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace pdserve::engine {

absl::StatusOr<GeneratedSequence> GenerateSingle(
    Model& model, const text::Tokenizer* tokenizer, const std::vector<int32_t>& prompt,
    const text::SamplingConfig& sampling, const std::vector<int32_t>& eos_token_ids,
    const GenerateOptions& options, const std::function<void(const std::string&)>& on_text) {
  const ModelConfig& config = model.config();
  if (prompt.empty()) return absl::InvalidArgumentError("prompt: must not be empty");
  RETURN_IF_ERROR(sampling.Validate(config.vocab_size));
  if (options.prefill_chunk < 1) return absl::InvalidArgumentError("prefill_chunk: must be >= 1");
  const int64_t total = static_cast<int64_t>(prompt.size()) + sampling.max_tokens;
  if (total > config.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt (", prompt.size(), " tokens) + max_tokens (", sampling.max_tokens,
                     ") exceeds the model's context of ", config.max_position_embeddings));
  }
  const int blocks = static_cast<int>((total + options.block_size - 1) / options.block_size);
  ASSIGN_OR_RETURN(auto pool, model.AllocateKvPool(model.MakeKvLayout(blocks, options.block_size,
                                                                      options.kv_dtype)));
  std::vector<int32_t> block_table(blocks);
  std::iota(block_table.begin(), block_table.end(), 0);

  const absl::Time start = absl::Now();
  GeneratedSequence out;
  text::GenerationStream stream(tokenizer, sampling, eos_token_ids);
  SamplerScratch scratch;
  PackedBatch batch;
  Logits logits;
  int position = 0;
  // Prefill in chunks; only the last chunk asks for logits.
  while (position < static_cast<int>(prompt.size())) {
    const int n = std::min<int>(options.prefill_chunk, static_cast<int>(prompt.size()) - position);
    const bool last = position + n == static_cast<int>(prompt.size());
    batch.Clear();
    batch.Add(absl::MakeConstSpan(prompt).subspan(position, n), position, block_table, last);
    const RowSampling row{&sampling, static_cast<uint64_t>(position + n)};
    RETURN_IF_ERROR(ForwardAndSample(
        model, batch, *pool, {},
        last ? absl::MakeConstSpan(&row, 1) : absl::Span<const RowSampling>(), &logits, &scratch));
    position += n;
  }
  while (true) {
    const int32_t token = logits.sampled[0];
    if (out.tokens.empty()) out.time_to_first_token = absl::Now() - start;
    out.tokens.push_back(token);
    ASSIGN_OR_RETURN(text::GenerationStream::Update update, stream.Push(token));
    out.text += update.text;
    if (on_text && !update.text.empty()) on_text(update.text);
    if (update.finish != text::FinishReason::kNone) {
      out.finish = update.finish;
      out.stop_reason = update.stop_reason;
      break;
    }
    batch.Clear();
    const int32_t next[1] = {token};
    batch.Add(next, position, block_table, true, /*decode=*/true);
    ++position;
    const RowSampling row{&sampling, static_cast<uint64_t>(position)};
    RETURN_IF_ERROR(
        ForwardAndSample(model, batch, *pool, {}, absl::MakeConstSpan(&row, 1), &logits, &scratch));
  }
  out.total_time = absl::Now() - start;
  return out;
}

}  // namespace pdserve::engine
