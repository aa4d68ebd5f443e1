#include "engine/batch.h"

#include "absl/strings/str_cat.h"

namespace pdserve::engine {

void PackedBatch::Clear() {
  tokens.clear();
  cu_seqlens.assign(1, 0);
  sequences.clear();
}

void PackedBatch::Add(absl::Span<const int32_t> seq_tokens, int32_t start_position,
                      absl::Span<const int32_t> block_table, bool want_logits, bool decode) {
  tokens.insert(tokens.end(), seq_tokens.begin(), seq_tokens.end());
  cu_seqlens.push_back(static_cast<int32_t>(tokens.size()));
  sequences.push_back(BatchSequence{start_position, static_cast<int32_t>(seq_tokens.size()),
                                    block_table, want_logits, decode});
}

int PackedBatch::num_logit_rows() const {
  int rows = 0;
  for (const BatchSequence& s : sequences) rows += s.want_logits ? 1 : 0;
  return rows;
}

absl::Status PackedBatch::Validate(const KvLayout& layout, int vocab_size,
                                   int max_positions) const {
  if (cu_seqlens.size() != sequences.size() + 1 || cu_seqlens.back() != num_tokens()) {
    return absl::InvalidArgumentError("batch: cu_seqlens does not match the sequences");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("batch: token id ", tokens[i], " at index ", i,
                                                     " is outside [0, ", vocab_size, ")"));
    }
  }
  for (size_t s = 0; s < sequences.size(); ++s) {
    const BatchSequence& seq = sequences[s];
    if (seq.num_tokens <= 0 || seq.start_position < 0 ||
        cu_seqlens[s + 1] - cu_seqlens[s] != seq.num_tokens) {
      return absl::InvalidArgumentError(absl::StrCat("batch: sequence ", s, " has no tokens"));
    }
    const int64_t end = int64_t{seq.start_position} + seq.num_tokens;
    if (end > max_positions) {
      return absl::InvalidArgumentError(absl::StrCat("batch: sequence ", s, " reaches position ",
                                                     end, ", beyond the model's ", max_positions));
    }
    const int64_t needed = (end + layout.block_size - 1) / layout.block_size;
    if (static_cast<int64_t>(seq.block_table.size()) < needed) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch: sequence ", s, " needs ", needed, " blocks for ", end,
                       " positions, its block table has ", seq.block_table.size()));
    }
    for (int64_t b = 0; b < needed; ++b) {
      if (seq.block_table[b] < 0 || seq.block_table[b] >= layout.num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("batch: sequence ", s, " block id ",
                                                       seq.block_table[b], " is outside [0, ",
                                                       layout.num_blocks, ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pdserve::engine
