#include "common/worker_reports.h"

namespace pdserve {

void StepHistory::Add(const StepObservation& step) {
  steps_.push_back(step);
  if (steps_.size() > kMaxReportedSteps) steps_.pop_front();
}

std::vector<StepObservation> StepHistory::Take() {
  std::vector<StepObservation> out(steps_.begin(), steps_.end());
  steps_.clear();
  return out;
}

}  // namespace pdserve
