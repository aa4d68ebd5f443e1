// Messages a sender and a receiver exchange besides the data itself (fixed-size headers;
// both ends are the same architecture, little-endian x86-64 or aarch64).
//   Data (active-message data path only): DataHeader + one coalesced run of regions.
//   Control: LAYER_DONE after a layer's writes are complete at the receiver, COMPLETE after
//   the last one (carries the block-list hash and, for counted paths, the byte total), and
//   ABORT when the sender stops early.
//   Hello / hello-ack (active-message data path only): before its first data, a sender
//   greets a new receiver and waits for the answer, which the receiver sends back over the
//   endpoint UCX's wireup created towards the sender. The answer leaves only after the
//   receiver's own wireup reply to that sender, so once it arrives nothing of the connection
//   setup is still queued at the receiver: UCX 1.13 aborts a receiver whose sender dies while
//   that reply waits in a TCP endpoint's pending queue (docs/reliability.md).
// Thread-safety: plain values.
#ifndef PDSERVE_KVTRANSFER_WIRE_H_
#define PDSERVE_KVTRANSFER_WIRE_H_

#include <cstdint>
#include <cstring>
#include <optional>

namespace pdserve::kvtransfer {

inline constexpr uint32_t kWireMagic = 0x4654564B;  // "KVTF"
inline constexpr uint16_t kWireVersion = 1;
inline constexpr unsigned kAmData = 17;
inline constexpr unsigned kAmControl = 18;
inline constexpr unsigned kAmHello = 19;
inline constexpr unsigned kAmHelloAck = 20;

struct DataHeader {
  uint32_t magic = kWireMagic;
  uint16_t version = kWireVersion;
  uint16_t kv = 0;  // 0 = K, 1 = V.
  uint64_t token = 0;
  uint64_t epoch = 0;
  uint64_t layout_hash = 0;
  int32_t layer = 0;
  int32_t first_block = 0;  // First destination block of the run.
  int32_t num_blocks = 0;   // Consecutive destination blocks in the run.
  int32_t reserved = 0;
};

enum class ControlType : uint16_t { kLayerDone = 1, kComplete = 2, kAbort = 3 };

struct ControlHeader {
  uint32_t magic = kWireMagic;
  uint16_t version = kWireVersion;
  ControlType type = ControlType::kLayerDone;
  uint64_t token = 0;
  uint64_t epoch = 0;
  uint64_t layout_hash = 0;
  int32_t layer = 0;         // kLayerDone: the layer.
  int32_t layers = 0;        // kComplete: layers written.
  uint64_t blocks_hash = 0;  // kComplete: HashBlocks of the destination blocks.
  uint64_t bytes = 0;        // kComplete: bytes the receiver must count (0: not counted).
};

struct HelloHeader {
  uint32_t magic = kWireMagic;
  uint16_t version = kWireVersion;
  uint16_t reserved = 0;
  uint64_t nonce = 0;  // The sender's; the answer carries it back.
};

// Parses a header of type T from raw bytes; nullopt if the size, magic or version is wrong.
template <typename T>
std::optional<T> ParseHeader(const void* data, size_t size) {
  if (data == nullptr || size != sizeof(T)) return std::nullopt;
  T out;
  std::memcpy(&out, data, sizeof(T));
  if (out.magic != kWireMagic || out.version != kWireVersion) return std::nullopt;
  return out;
}

}  // namespace pdserve::kvtransfer

#endif  // PDSERVE_KVTRANSFER_WIRE_H_
