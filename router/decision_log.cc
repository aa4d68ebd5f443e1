#include "router/decision_log.h"

namespace pdserve::router {

void DecisionLog::Add(DecisionRecord record) {
  absl::MutexLock lock(&mu_);
  records_.push_front(std::move(record));
  while (records_.size() > capacity_) records_.pop_back();
}

std::vector<DecisionRecord> DecisionLog::Recent(size_t n) const {
  absl::MutexLock lock(&mu_);
  std::vector<DecisionRecord> out;
  for (size_t i = 0; i < records_.size() && i < n; ++i) out.push_back(records_[i]);
  return out;
}

}  // namespace pdserve::router
