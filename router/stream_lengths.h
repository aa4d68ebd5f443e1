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

// Streams by length, and by how tight their TPOT objectives are: a delay of d ms costs a
// stream with objective o the share d / o of it (a batch request's 100 ms objective absorbs
// what an interactive one's 25 ms does not).
struct StreamLengths {
  StreamLengthCounts count{};           // Every stream.
  StreamLengthCounts with_objective{};  // Those that carry a TPOT objective...
  std::array<double, kStreamLengthBuckets> inverse_tpot_ms{};  // ...and the sum of 1 / it.

  // `tpot_objective_ms` 0: none (the router's default applies).
  void Add(int bucket, double tpot_objective_ms) { Change(bucket, tpot_objective_ms, 1); }
  void Remove(int bucket, double tpot_objective_ms) { Change(bucket, tpot_objective_ms, -1); }
  bool operator==(const StreamLengths&) const = default;

 private:
  void Change(int bucket, double tpot_objective_ms, int sign) {
    count[bucket] += sign;
    if (tpot_objective_ms > 0) {
      with_objective[bucket] += sign;
      inverse_tpot_ms[bucket] += sign / tpot_objective_ms;
      if (with_objective[bucket] == 0) inverse_tpot_ms[bucket] = 0;  // No rounding residue.
    }
  }
};

}  // namespace pdserve::router

#endif  // PDSERVE_ROUTER_STREAM_LENGTHS_H_
