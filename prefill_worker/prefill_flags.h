// The prefill role's flags (--max_batch_tokens, --transfer_mode, --layer_delay), shared by
// pdserve-prefill and the role-switching pdserve-decode.
#ifndef PDSERVE_PREFILL_WORKER_PREFILL_FLAGS_H_
#define PDSERVE_PREFILL_WORKER_PREFILL_FLAGS_H_

#include "prefill_worker/prefill_batcher.h"

namespace pdserve::prefill {

PrefillBatcherConfig PrefillBatcherConfigFromFlags();

}  // namespace pdserve::prefill

#endif  // PDSERVE_PREFILL_WORKER_PREFILL_FLAGS_H_
