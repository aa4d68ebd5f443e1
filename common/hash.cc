#include "common/hash.h"

#include <cstring>

namespace pdserve {
namespace {

constexpr uint64_t kP1 = 11400714785074694791ULL;
constexpr uint64_t kP2 = 14029467366897019727ULL;
constexpr uint64_t kP3 = 1609587929392839161ULL;
constexpr uint64_t kP4 = 9650029242287828579ULL;
constexpr uint64_t kP5 = 2870177450012600261ULL;

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t Read64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // Little-endian hosts only (x86-64, aarch64).
}
inline uint32_t Read32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t Round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = Rotl(acc, 31);
  return acc * kP1;
}
inline uint64_t MergeRound(uint64_t acc, uint64_t val) {
  acc ^= Round(0, val);
  return acc * kP1 + kP4;
}

uint64_t Finish(uint64_t h, const uint8_t* p, size_t len) {
  while (len >= 8) {
    h ^= Round(0, Read64(p));
    h = Rotl(h, 27) * kP1 + kP4;
    p += 8;
    len -= 8;
  }
  if (len >= 4) {
    h ^= static_cast<uint64_t>(Read32(p)) * kP1;
    h = Rotl(h, 23) * kP2 + kP3;
    p += 4;
    len -= 4;
  }
  while (len > 0) {
    h ^= (*p) * kP5;
    h = Rotl(h, 11) * kP1;
    ++p;
    --len;
  }
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

}  // namespace

uint64_t Xxh64(const void* data, size_t size, uint64_t seed) {
  // In one pass over the bytes, without the streaming state's buffer: the router hashes every
  // block of every prompt it places (a 72-byte input for 16 tokens), so the per-call cost
  // counts. Xxh64Test checks it against the reference vectors and the streaming state.
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const uint8_t* const end = p + size;
  uint64_t h;
  if (size >= 32) {
    uint64_t v[4] = {seed + kP1 + kP2, seed + kP2, seed, seed - kP1};
    do {
      for (int i = 0; i < 4; ++i) v[i] = Round(v[i], Read64(p + 8 * i));
      p += 32;
    } while (end - p >= 32);
    h = Rotl(v[0], 1) + Rotl(v[1], 7) + Rotl(v[2], 12) + Rotl(v[3], 18);
    for (int i = 0; i < 4; ++i) h = MergeRound(h, v[i]);
  } else {
    h = seed + kP5;
  }
  h += size;
  return Finish(h, p, static_cast<size_t>(end - p));
}

Xxh64State::Xxh64State(uint64_t seed) : seed_(seed) {
  v_[0] = seed + kP1 + kP2;
  v_[1] = seed + kP2;
  v_[2] = seed;
  v_[3] = seed - kP1;
}

void Xxh64State::Update(const void* data, size_t size) {
  if (size == 0) return;  // `data` may then be null (an empty span's), which memcpy must not see.
  const uint8_t* p = static_cast<const uint8_t*>(data);
  total_ += size;
  if (buffered_ + size < 32) {
    std::memcpy(buffer_ + buffered_, p, size);
    buffered_ += size;
    return;
  }
  if (buffered_ > 0) {
    const size_t fill = 32 - buffered_;
    std::memcpy(buffer_ + buffered_, p, fill);
    for (int i = 0; i < 4; ++i) v_[i] = Round(v_[i], Read64(buffer_ + 8 * i));
    p += fill;
    size -= fill;
    buffered_ = 0;
  }
  while (size >= 32) {
    for (int i = 0; i < 4; ++i) v_[i] = Round(v_[i], Read64(p + 8 * i));
    p += 32;
    size -= 32;
  }
  std::memcpy(buffer_, p, size);
  buffered_ = size;
}

uint64_t Xxh64State::Digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = Rotl(v_[0], 1) + Rotl(v_[1], 7) + Rotl(v_[2], 12) + Rotl(v_[3], 18);
    for (int i = 0; i < 4; ++i) h = MergeRound(h, v_[i]);
  } else {
    h = seed_ + kP5;
  }
  h += total_;
  return Finish(h, buffer_, buffered_);
}

}  // namespace pdserve
