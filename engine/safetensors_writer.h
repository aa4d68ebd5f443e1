// Writes safetensors files (the format safetensors.h reads): used by pdserve-make-model
// and by tests that build checkpoints, including deliberately broken ones.
// Thread-safety: one writer per file.
#ifndef PDSERVE_ENGINE_SAFETENSORS_WRITER_H_
#define PDSERVE_ENGINE_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/safetensors.h"

namespace pdserve::engine {

class SafetensorsWriter {
 public:
  // Adds a float32 tensor converted to `dtype` (F32, F16 or BF16).
  void AddF32(const std::string& name, std::vector<int64_t> shape, absl::Span<const float> values,
              TensorDType dtype = TensorDType::kF32);
  // Adds raw bytes with an arbitrary dtype name (tests of unsupported dtypes).
  void AddRaw(const std::string& name, const std::string& dtype_name, std::vector<int64_t> shape,
              std::string bytes);
  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  size_t data_bytes() const { return data_.size(); }
  std::vector<std::string> names() const;

  // Writes the file (header padded to a multiple of 8 bytes, as the reference writer does).
  absl::Status Write(const std::string& path) const;
  // The file's bytes.
  std::string Serialize() const;

 private:
  struct Entry {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t begin;
    uint64_t end;
  };
  std::vector<Entry> entries_;
  std::string data_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_SAFETENSORS_WRITER_H_
