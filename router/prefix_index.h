// Which decode workers hold which full KV blocks in their prefix caches, built from the
// block-hash events they stream to the router (stored / evicted / reset). Block hashes are
// chained (kvcache/block_hash.h: each covers its parent), so a worker's cached prefix for a
// prompt is the run of the prompt's block hashes it holds from the first one.
//
// Matching walks the prompt's hashes once and intersects their holder sets: its work is the
// matched blocks times their holders, independent of how many workers or blocks the cluster
// has (the approach of Dynamo's KV indexer and SGLang's cache-aware router).
// Thread-safety: not thread-safe; the worker registry guards it.
#ifndef PDSERVE_ROUTER_PREFIX_INDEX_H_
#define PDSERVE_ROUTER_PREFIX_INDEX_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/types/span.h"

namespace pdserve::router {

class PrefixIndex {
 public:
  using Slot = uint32_t;  // A registered worker's slot in the registry.

  // Applies one batch of events from `worker`. `reset` drops everything it reported before.
  void Apply(Slot worker, bool reset, absl::Span<const uint64_t> stored,
             absl::Span<const uint64_t> evicted);
  // Forgets a worker entirely.
  void RemoveWorker(Slot worker);

  // For each worker holding at least the first block: how many leading blocks of `hashes` it
  // holds. Appended to `out` as (worker, blocks).
  void Match(absl::Span<const uint64_t> hashes, std::vector<std::pair<Slot, int>>* out) const;
  // The same for a prompt of `blocks` blocks whose hashes are made as needed: `hash(i)` is
  // called for i = 0, 1, 2, ... in order, each once, and no further than some worker holds
  // the blocks before it. (A prompt nobody holds costs one hash, not one per block: hashing
  // every block was a fifth of a decision among 256 workers.)
  void Match(size_t blocks, absl::FunctionRef<uint64_t(size_t)> hash,
             std::vector<std::pair<Slot, int>>* out) const;

  size_t blocks_of(Slot worker) const;
  size_t distinct_blocks() const { return holders_.size(); }

 private:
  void Add(Slot worker, uint64_t hash);
  void Remove(Slot worker, uint64_t hash);

  absl::flat_hash_map<uint64_t, absl::InlinedVector<Slot, 4>> holders_;
  absl::flat_hash_map<Slot, absl::flat_hash_set<uint64_t>> by_worker_;
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_PREFIX_INDEX_H_
