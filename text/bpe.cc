#include "text/bpe.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "text/byte_level.h"

namespace pdserve::text {
namespace {

// What one cache entry costs: the key and ids on the heap plus the map slot and the two
// containers' headers.
size_t EntryBytes(size_t word_bytes, size_t num_ids) {
  return word_bytes + num_ids * sizeof(int32_t) + sizeof(std::string) +
         sizeof(std::vector<int32_t>) + 16;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(
    absl::flat_hash_map<std::string, int32_t> vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges) {
  std::unique_ptr<BpeModel> model(new BpeModel());
  model->vocab_ = std::move(vocab);
  model->ignore_merges_ = ignore_merges;
  model->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto l = model->vocab_.find(left);
    auto r = model->vocab_.find(right);
    auto m = model->vocab_.find(absl::StrCat(left, right));
    if (l == model->vocab_.end() || r == model->vocab_.end() || m == model->vocab_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: merge #", rank, " '", left,
                                                     " ", right,
                                                     "' uses a token not in the vocab"));
    }
    // First occurrence wins, as in Hugging Face's loader.
    model->merges_.try_emplace(PairKey(l->second, r->second),
                               Merge{static_cast<int32_t>(rank), m->second});
  }
  return model;
}

absl::Status BpeModel::Encode(absl::string_view word, std::vector<int32_t>* ids) const {
  if (ignore_merges_) {
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      ids->push_back(it->second);
      return absl::OkStatus();
    }
  }
  {
    absl::MutexLock lock(&cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return absl::OkStatus();
    }
  }
  std::vector<int32_t> encoded;
  if (absl::Status s = EncodeUncached(word, &encoded); !s.ok()) return s;
  ids->insert(ids->end(), encoded.begin(), encoded.end());
  if (word.size() > kMaxCachedWordBytes) return absl::OkStatus();
  const size_t entry_bytes = EntryBytes(word.size(), encoded.size());
  absl::MutexLock lock(&cache_mu_);
  if (cache_bytes_ + entry_bytes > kMaxCacheBytes) {
    cache_.clear();
    cache_bytes_ = 0;
  }
  if (cache_.emplace(std::string(word), std::move(encoded)).second) cache_bytes_ += entry_bytes;
  return absl::OkStatus();
}

size_t BpeModel::cache_bytes() const {
  absl::MutexLock lock(&cache_mu_);
  return cache_bytes_;
}

absl::Status BpeModel::EncodeUncached(absl::string_view word, std::vector<int32_t>* ids) const {
  // Symbols in a doubly linked list; a min-heap of candidate merges keyed by (rank, left
  // position); stale heap entries are skipped when popped.
  struct Symbol {
    int32_t id;
    int prev;
    int next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t start = pos;
    NextCodePoint(word, &pos);
    auto it = vocab_.find(word.substr(start, pos - start));
    if (it == vocab_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer: symbol '", word.substr(start, pos - start), "' is not in the vocabulary"));
    }
    const int index = static_cast<int>(symbols.size());
    symbols.push_back(Symbol{it->second, index - 1, index + 1, true});
  }
  if (symbols.empty()) return absl::OkStatus();
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank;
    int left;
    int32_t left_id;
    int32_t right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push_pair = [&](int left) {
    if (left < 0) return;
    const int right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(PairKey(symbols[left].id, symbols[right].id));
    if (it != merges_.end())
      heap.push(Candidate{it->second.rank, left, symbols[left].id, symbols[right].id});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[c.left];
    if (!left.alive || left.id != c.left_id || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != c.right_id) continue;
    auto it = merges_.find(PairKey(left.id, right.id));
    left.id = it->second.merged_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    push_pair(left.prev);
    push_pair(c.left);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) ids->push_back(symbols[i].id);
  return absl::OkStatus();
}

}  // namespace pdserve::text
