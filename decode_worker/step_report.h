// What a decode worker reports about itself, computed from its scheduler: the observation of
// each engine step, its load, and the blocks an offloaded prompt's KV is written into. The
// engine loop and pdserve-sim's decode worker both call these, so that the router learns the
// same things from a simulated worker as from a real one.
// Thread-safety: pure functions of their arguments (the caller owns the scheduler).
#ifndef PDSERVE_DECODE_WORKER_STEP_REPORT_H_
#define PDSERVE_DECODE_WORKER_STEP_REPORT_H_

#include <cstdint>
#include <vector>

#include "common/worker_reports.h"
#include "decode_worker/scheduler.h"
#include "engine/batch.h"

namespace pdserve::decode {

// A planned step's work, as the cost model prices it (duration_ms and host_ms 0: the caller
// sets them once the step ran).
StepObservation ObserveStep(const StepPlan& plan);

// The engine batch that runs a planned step: each chunk's tokens at its positions, with its
// sequence's block table, marked decode as the plan counts it (so a backend that times the
// batch, the emulated one, sees what ObserveStep reports).
void PackStep(const StepPlan& plan, engine::PackedBatch* batch);

// The scheduler's load as the router sees it: free blocks count the evictable cached ones too
// (admission evicts them on demand).
LoadSnapshot DecodeLoad(const Scheduler& scheduler, const kvcache::BlockCounts& blocks);

// The blocks of `seq`'s table an offload's KV transfer writes: those holding prompt positions
// [cached_tokens, prompt_len) (the cached prefix's blocks are the prefix cache's).
std::vector<int32_t> TransferBlocks(const Sequence& seq, int cached_tokens, int block_size);

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_STEP_REPORT_H_
