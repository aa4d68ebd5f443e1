// Paged attention for a group of query rows that share one sequence and one KV head (GQA):
//   scores[r][j] = q_r . k_j / sqrt(head_dim),   j = 0 .. position_r
//   out_r        = sum_j softmax(scores[r])_j v_j
// reading keys and values from the paged pool through the block table (f32, f16 or bf16).
//
// Batch invariance: a score is one FMA chain over head_dim (the packed-panel GEMM with the
// keys transposed into panels), and an output element is one FMA chain over j =
// 0..position in order, so a row's result depends only on its query and the cache, never on
// which other rows share the call (decode, prefill chunk, or a mixed step). Both phases run
// as register-tiled microkernels (12 rows x 32 keys or dims), which gives prefill attention
// GEMM-like throughput.
// Thread-safety: reentrant; give each thread its own scratch.
#ifndef PDSERVE_ENGINE_CPU_ATTENTION_H_
#define PDSERVE_ENGINE_CPU_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "common/kv_layout.h"
#include "engine/cpu/aligned_buffer.h"
#include "engine/cpu/cpu_isa.h"

namespace pdserve::engine {

// One query row: a (token, head) pair.
struct AttentionRow {
  const float* q;  // head_dim floats
  float* out;      // head_dim floats
  int position;    // Attends to keys 0..position.
};

struct AttentionScratch {
  std::vector<float> scores;           // rows x stride
  std::vector<float> queries;          // rows x head_dim, contiguous
  AlignedBuffer<float> key_panels;     // [ceil(keys / 32)][head_dim][32], 64-byte aligned
  std::vector<const uint8_t*> k_rows;  // Key row of each position.
  std::vector<const uint8_t*> v_rows;  // Value row of each position.
  std::vector<float> inv_sum;
  std::vector<float> widened_key;  // A half-precision key row as floats (head_dim).
};

// Runs on `isa`'s kernels.
void AttendRows(CpuIsa isa, const KvLayout& layout, const uint8_t* pool_base, int layer,
                int kv_head, const AttentionRow* rows, int num_rows, const int32_t* block_table,
                float scale, AttentionScratch* scratch);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_CPU_ATTENTION_H_
