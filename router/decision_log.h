// The router's most recent placement decisions, for `pdctl status` and operators: a bounded
// ring of DecisionRecords (the decision, its inputs and its predictions).
// Thread-safety: all methods are safe from any thread.
#ifndef PDSERVE_ROUTER_DECISION_LOG_H_
#define PDSERVE_ROUTER_DECISION_LOG_H_

#include <deque>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "router/placement_decision.h"

namespace pdserve::router {

class DecisionLog {
 public:
  explicit DecisionLog(size_t capacity) : capacity_(capacity) {}
  void Add(DecisionRecord record);
  // Newest first, at most `n`.
  std::vector<DecisionRecord> Recent(size_t n) const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<DecisionRecord> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_DECISION_LOG_H_
