// The order a prefill worker takes its queued jobs in: earliest due first, arrival order among
// equals. A job is due when its request's TTFT objective falls due (the router's arrival plus
// the objective: PrefillRequest.ttft_due_in_ms), so a request with a tight objective is not
// computed after one that can wait (an interactive prompt behind a batch one), while requests
// of one objective keep their arrival order: a queue of one class is the FIFO it was. (Due at
// the call's deadline instead, which gives a long prompt twice its predicted time, made the
// queue shortest-first: long prompts waited behind every short one and missed their objective,
// 0.92x the best fixed policy on the heavy-tailed cell of the workload family.)
// The prefill batcher and the cluster simulator queue with this one rule.
// Thread-safety: none; the caller guards the queue.
#ifndef PDSERVE_PREFILL_WORKER_QUEUE_ORDER_H_
#define PDSERVE_PREFILL_WORKER_QUEUE_ORDER_H_

#include <algorithm>
#include <utility>

namespace pdserve::prefill {

// Inserts `job` into `queue` (a sequence already in this order) after every job due no later
// than it. `due_of(job)` gives when a job is due (any ordered type).
template <typename Queue, typename Job, typename DueOf>
void InsertByDue(Queue& queue, Job job, DueOf due_of) {
  const auto due = due_of(job);
  const auto at =
      std::upper_bound(queue.begin(), queue.end(), due,
                       [&](const auto& d, const auto& queued) { return d < due_of(queued); });
  queue.insert(at, std::move(job));
}

}  // namespace pdserve::prefill

#endif  // PDSERVE_PREFILL_WORKER_QUEUE_ORDER_H_
