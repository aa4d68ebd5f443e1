#include "router/counts_by_key.h"

#include <algorithm>

namespace pdserve::router {

bool CountsByKey::TryAdd(absl::string_view key, int64_t limit) {
  absl::MutexLock lock(&mu_);
  auto it = counts_.find(key);
  const int held = it == counts_.end() ? 0 : it->second;
  if (held >= limit) return false;
  if (it == counts_.end()) {
    counts_.emplace(std::string(key), 1);
  } else {
    ++it->second;
  }
  return true;
}

void CountsByKey::Remove(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  auto it = counts_.find(key);
  if (it != counts_.end() && --it->second <= 0) counts_.erase(it);
}

int CountsByKey::Get(absl::string_view key) const {
  absl::MutexLock lock(&mu_);
  auto it = counts_.find(key);
  return it == counts_.end() ? 0 : it->second;
}

int CountsByKey::keys() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(counts_.size());
}

std::vector<std::pair<std::string, int>> CountsByKey::Largest(int n) const {
  std::vector<std::pair<std::string, int>> all;
  {
    absl::MutexLock lock(&mu_);
    all.assign(counts_.begin(), counts_.end());
  }
  auto more = [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  };
  const size_t keep = std::min(all.size(), static_cast<size_t>(std::max(n, 0)));
  std::partial_sort(all.begin(), all.begin() + static_cast<ptrdiff_t>(keep), all.end(), more);
  all.resize(keep);
  return all;
}

}  // namespace pdserve::router
