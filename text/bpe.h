// Byte-pair-encoding model: a vocabulary of byte-level token strings and ranked merges.
// Encoding a pre-token applies the lowest-ranked applicable merge until none applies (equal
// ranks left to right), as Hugging Face tokenizers' BPE does; with ignore_merges (Llama 3) a
// pre-token that is itself in the vocabulary becomes that single token.
// Thread-safety: Encode() is safe to call concurrently (its cache is locked).
#ifndef PDSERVE_TEXT_BPE_H_
#define PDSERVE_TEXT_BPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace pdserve::text {

class BpeModel {
 public:
  // `merges` are pairs of vocabulary strings in priority order.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(
      absl::flat_hash_map<std::string, int32_t> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges);

  // Appends the ids of `word` (already in byte-level form). Fails only if a single byte's
  // symbol is missing from the vocabulary.
  absl::Status Encode(absl::string_view word, std::vector<int32_t>* ids) const;

  const absl::flat_hash_map<std::string, int32_t>& vocab() const { return vocab_; }
  // Bytes the word cache holds now (keys, ids and per-entry overhead); at most 8 MiB.
  size_t cache_bytes() const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  BpeModel() = default;
  absl::Status EncodeUncached(absl::string_view word, std::vector<int32_t>* ids) const;
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  bool ignore_merges_ = false;

  // The word cache is bounded in bytes, not entries: one rejected 30 MiB prompt of long
  // unique "words" once grew a router by a gigabyte. Long words are not cached at all (as in
  // Hugging Face's tokenizers, whose cache skips words over 256 characters).
  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kMaxCacheBytes = 8 << 20;
  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_ ABSL_GUARDED_BY(cache_mu_);
  mutable size_t cache_bytes_ ABSL_GUARDED_BY(cache_mu_) = 0;
};

}  // namespace pdserve::text

#endif  // PDSERVE_TEXT_BPE_H_
