// Streams counted by the tokens they may generate (max_tokens), in powers of two: what the
// router knows of how long the streams it relays to a decode worker will run. The cost model
// reads it (DecodeCandidate::short_streams): a short stream's TPOT is the mean of a few steps,
// so a local prefill's slow mixed steps weigh on it whole.
// Thread-safety: plain values and a pure function.
#ifndef PDSERVE_ROUTER_STREAM_LENGTHS_H_
#define PDSERVE_ROUTER_STREAM_LENGTHS_H_

#include <array>

namespace pdserve::router {

inline constexpr int kStreamLengthBuckets = 16;
// Bucket b counts streams of max_tokens in [2^b, 2^(b+1)); the last one also every longer one.
using StreamLengthCounts = std::array<int, kStreamLengthBuckets>;

// The bucket of a stream of `max_tokens` (>= 1; smaller counts as 1).
inline int StreamLengthBucket(int max_tokens) {
  int b = 0;
  while (b < kStreamLengthBuckets - 1 && (max_tokens >> (b + 1)) > 0) ++b;
  return b;
}

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_STREAM_LENGTHS_H_
