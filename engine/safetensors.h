// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {...}}
// then the tensor bytes, offsets relative to the end of the header. Files are memory-mapped;
// nothing is copied until a tensor is converted.
// Every structural problem (truncation, bad JSON, offsets out of range or overlapping, a
// size that disagrees with dtype x shape) is an absl::Status naming the tensor and the
// expected versus found value.
// Thread-safety: SafetensorsFile is immutable after Open().
#ifndef PDSERVE_ENGINE_SAFETENSORS_H_
#define PDSERVE_ENGINE_SAFETENSORS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace pdserve::engine {

enum class TensorDType { kF32, kF16, kBF16, kUnsupported };

struct TensorInfo {
  std::string name;
  TensorDType dtype = TensorDType::kUnsupported;
  std::string dtype_name;  // As written in the header, e.g. "BF16", "I8".
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // Byte offsets relative to the data section.
  uint64_t end = 0;
  int64_t num_elements() const;
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;         // Where the data section starts in the file (8 + N).
  std::vector<TensorInfo> tensors;  // In header order.
  absl::flat_hash_map<std::string, std::string> metadata;
};

// Parses and validates the header of a safetensors file whose full contents (or at least a
// prefix; `file_size` is the real size) are `bytes`. `file_name` prefixes errors.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view bytes,
                                                         uint64_t file_size,
                                                         absl::string_view file_name);

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const TensorInfo* Find(absl::string_view name) const;
  // The tensor's raw bytes inside the mapping.
  absl::Span<const uint8_t> Data(const TensorInfo& tensor) const;
  absl::string_view header_bytes() const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* mapping_ = nullptr;
  size_t size_ = 0;
  SafetensorsHeader header_;
  absl::flat_hash_map<std::string, size_t> index_;
};

size_t TensorDTypeSize(TensorDType dtype);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_SAFETENSORS_H_
