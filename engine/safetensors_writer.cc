#include "engine/safetensors_writer.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "engine/half.h"
#include "nlohmann/json.hpp"

namespace pdserve::engine {

void SafetensorsWriter::AddF32(const std::string& name, std::vector<int64_t> shape,
                               absl::Span<const float> values, TensorDType dtype) {
  std::string bytes;
  std::string dtype_name;
  if (dtype == TensorDType::kF32) {
    bytes.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
    dtype_name = "F32";
  } else {
    std::vector<uint16_t> packed(values.size());
    if (dtype == TensorDType::kF16) {
      FloatToHalf(values.data(), packed.data(), values.size());
      dtype_name = "F16";
    } else {
      FloatToBf16(values.data(), packed.data(), values.size());
      dtype_name = "BF16";
    }
    bytes.assign(reinterpret_cast<const char*>(packed.data()), packed.size() * sizeof(uint16_t));
  }
  AddRaw(name, dtype_name, std::move(shape), std::move(bytes));
}

void SafetensorsWriter::AddRaw(const std::string& name, const std::string& dtype_name,
                               std::vector<int64_t> shape, std::string bytes) {
  Entry e{name, dtype_name, std::move(shape), data_.size(), data_.size() + bytes.size()};
  data_ += bytes;
  entries_.push_back(std::move(e));
}

std::vector<std::string> SafetensorsWriter::names() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

std::string SafetensorsWriter::Serialize() const {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');
  std::string out;
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += text;
  out += data_;
  return out;
}

absl::Status SafetensorsWriter::Write(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  const std::string bytes = Serialize();
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("write failed: ", path));
  return absl::OkStatus();
}

}  // namespace pdserve::engine
