// How many of something each key holds (a client's requests in flight, a peer's worker
// registrations), each bounded by a limit the caller gives. A key's entry goes with its last
// unit, so memory is bounded by the units held, whatever keys callers invent.
// Thread-safety: thread-safe.
#ifndef PDSERVE_ROUTER_COUNTS_BY_KEY_H_
#define PDSERVE_ROUTER_COUNTS_BY_KEY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace pdserve::router {

class CountsByKey {
 public:
  // Counts one more for `key` unless it holds `limit` already (then changes nothing).
  bool TryAdd(absl::string_view key, int64_t limit);
  // One less for `key` (nothing if it holds none).
  void Remove(absl::string_view key);

  int Get(absl::string_view key) const;
  // Keys holding at least one.
  int keys() const;
  // The `n` keys holding the most, most first (ties by key).
  std::vector<std::pair<std::string, int>> Largest(int n) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_COUNTS_BY_KEY_H_
