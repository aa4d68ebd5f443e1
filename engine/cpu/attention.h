// Paged attention for one query token of one sequence, for the query heads that share one
// KV head (GQA), reading keys and values from the paged pool through the block table:
//   scores[g][j] = q_g . k_j / sqrt(head_dim),  j = 0 .. context_len - 1
//   out_g = sum_j softmax(scores[g])_j v_j
// The order of every reduction depends only on j and head_dim, so a query's output is the
// same whatever else shares the step and however its prompt was chunked.
// Thread-safety: reentrant; callers give each thread its own scratch.
#ifndef PDSERVE_ENGINE_CPU_ATTENTION_H_
#define PDSERVE_ENGINE_CPU_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "common/kv_layout.h"

namespace pdserve::engine {

struct AttentionScratch {
  std::vector<float> scores;  // group x context_len
  std::vector<float> kv_row;  // head_dim, for f16/bf16 caches
};

// q: `group` rows of head_dim (contiguous); out: `group` rows of head_dim.
void AttendGroup(const KvLayout& layout, const uint8_t* pool_base, int layer, int kv_head,
                 const float* q, int group, int context_len, const int32_t* block_table,
                 float scale, AttentionScratch* scratch, float* out);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_CPU_ATTENTION_H_
