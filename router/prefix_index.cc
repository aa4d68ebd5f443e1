#include "router/prefix_index.h"

#include <algorithm>

namespace pdserve::router {

void PrefixIndex::Add(Slot worker, uint64_t hash) {
  auto& holders = holders_[hash];
  if (std::find(holders.begin(), holders.end(), worker) == holders.end()) holders.push_back(worker);
}

void PrefixIndex::Remove(Slot worker, uint64_t hash) {
  auto it = holders_.find(hash);
  if (it == holders_.end()) return;
  auto& holders = it->second;
  holders.erase(std::remove(holders.begin(), holders.end(), worker), holders.end());
  if (holders.empty()) holders_.erase(it);
}

void PrefixIndex::Apply(Slot worker, bool reset, absl::Span<const uint64_t> stored,
                        absl::Span<const uint64_t> evicted) {
  if (reset) RemoveWorker(worker);
  auto& mine = by_worker_[worker];
  for (uint64_t h : evicted) {
    if (mine.erase(h) > 0) Remove(worker, h);
  }
  for (uint64_t h : stored) {
    if (mine.insert(h).second) Add(worker, h);
  }
}

void PrefixIndex::RemoveWorker(Slot worker) {
  auto it = by_worker_.find(worker);
  if (it == by_worker_.end()) return;
  for (uint64_t h : it->second) Remove(worker, h);
  by_worker_.erase(it);
}

void PrefixIndex::Match(absl::Span<const uint64_t> hashes,
                        std::vector<std::pair<Slot, int>>* out) const {
  Match(
      hashes.size(), [&](size_t i) { return hashes[i]; }, out);
}

void PrefixIndex::Match(size_t blocks, absl::FunctionRef<uint64_t(size_t)> hash,
                        std::vector<std::pair<Slot, int>>* out) const {
  if (blocks == 0) return;
  auto first = holders_.find(hash(0));
  if (first == holders_.end()) return;
  const size_t base = out->size();
  for (Slot w : first->second) out->emplace_back(w, 1);
  // Workers still matching occupy out[base, base + alive); the rest keep their final count.
  size_t alive = first->second.size();
  for (size_t i = 1; i < blocks && alive > 0; ++i) {
    auto it = holders_.find(hash(i));
    if (it == holders_.end()) break;
    const auto& holders = it->second;
    size_t kept = 0;
    for (size_t j = 0; j < alive; ++j) {
      auto& entry = (*out)[base + j];
      if (std::find(holders.begin(), holders.end(), entry.first) != holders.end()) {
        entry.second = static_cast<int>(i) + 1;
        std::swap((*out)[base + kept], entry);
        ++kept;
      }
    }
    alive = kept;
  }
}

size_t PrefixIndex::blocks_of(Slot worker) const {
  auto it = by_worker_.find(worker);
  return it == by_worker_.end() ? 0 : it->second.size();
}

}  // namespace pdserve::router
