// XXH64, a fast non-cryptographic 64-bit hash that is stable across processes and machines
// (unlike absl::Hash, which is salted per process). Used for model fingerprints and for the
// chained prefix-cache block hashes the router and decode workers must agree on.
// Thread-safety: stateless functions; Xxh64 objects are not shared.
#ifndef PDSERVE_COMMON_HASH_H_
#define PDSERVE_COMMON_HASH_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace pdserve {

uint64_t Xxh64(const void* data, size_t size, uint64_t seed = 0);
inline uint64_t Xxh64(absl::string_view s, uint64_t seed = 0) {
  return Xxh64(s.data(), s.size(), seed);
}

// Streaming XXH64: Update() any number of times, then Digest() (same result as one call).
class Xxh64State {
 public:
  explicit Xxh64State(uint64_t seed = 0);
  void Update(const void* data, size_t size);
  void Update(absl::string_view s) { Update(s.data(), s.size()); }
  uint64_t Digest() const;

 private:
  uint64_t v_[4];
  uint64_t total_ = 0;
  uint8_t buffer_[32];
  size_t buffered_ = 0;
  uint64_t seed_;
};

}  // namespace pdserve

#endif  // PDSERVE_COMMON_HASH_H_
