#include "decode_worker/step_report.h"

namespace pdserve::decode {

StepObservation ObserveStep(const StepPlan& plan) {
  StepObservation step;
  step.num_decode = plan.num_decode;
  step.num_prefill_tokens = plan.num_prefill_tokens;
  for (const PlannedChunk& c : plan.chunks) {
    const int64_t positions = c.attention_positions();
    step.context_tokens += positions;
    if (!c.decode) step.prefill_context_tokens += positions;
  }
  return step;
}

void PackStep(const StepPlan& plan, engine::PackedBatch* batch) {
  batch->Clear();
  for (const PlannedChunk& c : plan.chunks) {
    batch->Add(absl::MakeConstSpan(c.seq->tokens).subspan(c.start, c.num_tokens), c.start,
               c.seq->block_table, c.want_logits, c.decode);
  }
}

LoadSnapshot DecodeLoad(const Scheduler& scheduler, const kvcache::BlockCounts& blocks) {
  LoadSnapshot load;
  load.running = scheduler.num_running();
  load.waiting = scheduler.num_waiting();
  load.awaiting_kv = scheduler.num_awaiting_kv();
  load.free_blocks = blocks.free + blocks.cached;
  load.total_blocks = blocks.total;
  const PendingPrefill pending = scheduler.pending_prefill();
  load.pending_prefill_tokens = pending.tokens;
  load.pending_prefill_token_squares = pending.token_squares;
  load.context_tokens = scheduler.context_tokens();
  return load;
}

std::vector<int32_t> TransferBlocks(const Sequence& seq, int cached_tokens, int block_size) {
  const int first_block = cached_tokens / block_size;
  const int end_block = (seq.prompt_len + block_size - 1) / block_size;
  return std::vector<int32_t>(seq.block_table.begin() + first_block,
                              seq.block_table.begin() + end_block);
}

}  // namespace pdserve::decode
