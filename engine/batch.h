// A packed, variable-length batch for one engine step: the tokens of many sequences laid
// end to end (prefill chunks and single decode tokens mixed), with per-sequence query
// offsets (cu_seqlens), positions and block tables, as in vLLM's FlashAttention varlen path.
//
//   tokens:      [s0 t0 t1 t2 | s1 t0 | s2 t0 t1]          (T = 6)
//   cu_seqlens:  [0, 3, 4, 6]
//   sequence i:  positions start_position .. start_position + num_tokens - 1; its block
//                table maps position p to block block_table[p / block_size].
// The engine writes each token's K/V at its position, then attends over positions
// 0 .. p (the cached prefix, earlier chunks, and causally within the chunk).
// Thread-safety: a plain value; block tables are views the caller keeps alive.
#ifndef PDSERVE_ENGINE_BATCH_H_
#define PDSERVE_ENGINE_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/kv_layout.h"

namespace pdserve::engine {

struct BatchSequence {
  int32_t start_position = 0;             // Tokens of this sequence already in the KV cache.
  int32_t num_tokens = 0;                 // Its tokens in this batch.
  absl::Span<const int32_t> block_table;  // Covers positions < start_position + num_tokens.
  bool want_logits = true;                // Return logits for its last token.
  // A generated token (a decode), not a prompt chunk: what the scheduler planned it as. A
  // backend may treat the two differently (the emulated one times them by the step formula's
  // D and P terms, as the worker reports them); the result must not depend on it.
  bool decode = false;
};

struct PackedBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> cu_seqlens{0};
  std::vector<BatchSequence> sequences;

  void Clear();
  // Appends a sequence's tokens.
  void Add(absl::Span<const int32_t> seq_tokens, int32_t start_position,
           absl::Span<const int32_t> block_table, bool want_logits, bool decode = false);
  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int num_sequences() const { return static_cast<int>(sequences.size()); }
  int num_logit_rows() const;
  // Checks token ids against the vocabulary, block tables against the pool, and positions
  // against the model's maximum.
  absl::Status Validate(const KvLayout& layout, int vocab_size, int max_positions) const;
};

// Logits of the sequences that asked for them, in batch order: rows x vocab floats. When the
// forward pass was asked to sample (ForwardOptions::sample_rows), `sampled` holds each row's
// next token, and a backend that samples on the device leaves `data` empty.
struct Logits {
  std::vector<float> data;
  std::vector<int32_t> sampled;
  int rows = 0;
  int vocab = 0;
  absl::Span<const float> Row(int r) const {
    return absl::Span<const float>(data.data() + static_cast<size_t>(r) * vocab, vocab);
  }
};

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_BATCH_H_
