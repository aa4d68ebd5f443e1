#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace pdserve::engine {
namespace {

using nlohmann::json;

// Hugging Face's reader refuses headers above 100 MB; so do we.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

TensorDType ParseTensorDType(const std::string& s) {
  if (s == "F32") return TensorDType::kF32;
  if (s == "F16") return TensorDType::kF16;
  if (s == "BF16") return TensorDType::kBF16;
  return TensorDType::kUnsupported;
}

// Sizes of dtypes we can parse but not load (so sizes are still validated).
size_t ElementSize(const std::string& s) {
  if (s == "F64" || s == "I64" || s == "U64") return 8;
  if (s == "F32" || s == "I32" || s == "U32") return 4;
  if (s == "F16" || s == "BF16" || s == "I16" || s == "U16") return 2;
  if (s == "I8" || s == "U8" || s == "BOOL" || s == "F8_E4M3" || s == "F8_E5M2") return 1;
  return 0;
}

absl::Status Invalid(absl::string_view file, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", what));
}

}  // namespace

int64_t TensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t TensorDTypeSize(TensorDType dtype) {
  switch (dtype) {
    case TensorDType::kF32:
      return 4;
    case TensorDType::kF16:
    case TensorDType::kBF16:
      return 2;
    case TensorDType::kUnsupported:
      return 0;
  }
  return 0;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view bytes,
                                                         uint64_t file_size,
                                                         absl::string_view file_name) {
  if (bytes.size() < 8 || file_size < 8) {
    return Invalid(file_name, absl::StrCat("truncated: ", file_size,
                                           " bytes, expected at least 8 for the header length"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  if (header_len > kMaxHeaderBytes) {
    return Invalid(file_name, absl::StrCat("header length ", header_len, " exceeds the limit of ",
                                           kMaxHeaderBytes));
  }
  if (header_len + 8 > file_size || header_len + 8 > bytes.size()) {
    return Invalid(file_name, absl::StrCat("truncated: header length ", header_len,
                                           " but the file has ", file_size, " bytes"));
  }
  SafetensorsHeader header;
  header.data_offset = 8 + header_len;
  const uint64_t data_size = file_size - header.data_offset;
  const json root = json::parse(bytes.substr(8, header_len), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return Invalid(file_name, "header is not a JSON object");
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return Invalid(file_name, "__metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) {
          return Invalid(file_name, absl::StrCat("__metadata__.", m.key(), " is not a string"));
        }
        header.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrCat("tensor '", name, "'");
    if (!entry.is_object()) return Invalid(file_name, absl::StrCat(where, " is not an object"));
    auto dtype_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) {
      return Invalid(file_name, absl::StrCat(where, ": missing string field 'dtype'"));
    }
    if (shape_it == entry.end() || !shape_it->is_array()) {
      return Invalid(file_name, absl::StrCat(where, ": missing array field 'shape'"));
    }
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
      return Invalid(file_name, absl::StrCat(where, ": 'data_offsets' must be [begin, end]"));
    }
    TensorInfo info;
    info.name = name;
    info.dtype_name = dtype_it->get<std::string>();
    info.dtype = ParseTensorDType(info.dtype_name);
    const size_t element_size = ElementSize(info.dtype_name);
    if (element_size == 0) {
      return Invalid(file_name, absl::StrCat(where, ": unknown dtype '", info.dtype_name, "'"));
    }
    uint64_t elements = 1;
    for (const json& d : *shape_it) {
      if (!d.is_number_unsigned()) {
        return Invalid(file_name,
                       absl::StrCat(where, ": shape entries must be non-negative integers"));
      }
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && elements > (uint64_t{1} << 50) / dim) {
        return Invalid(file_name, absl::StrCat(where, ": shape is too large"));
      }
      elements *= dim;
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    info.begin = (*offsets_it)[0].get<uint64_t>();
    info.end = (*offsets_it)[1].get<uint64_t>();
    if (info.begin > info.end || info.end > data_size) {
      return Invalid(file_name, absl::StrCat(where, ": data_offsets [", info.begin, ", ", info.end,
                                             "] outside the data section of ", data_size,
                                             " bytes (file truncated?)"));
    }
    const uint64_t expected = elements * element_size;
    if (info.end - info.begin != expected) {
      return Invalid(
          file_name,
          absl::StrCat(where, ": ", info.end - info.begin, " bytes of data, expected ", expected,
                       " for ", info.dtype_name, "[", absl::StrJoin(info.shape, ","), "]"));
    }
    ranges.emplace_back(info.begin, info.end);
    header.tensors.push_back(std::move(info));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return Invalid(file_name,
                     absl::StrCat("tensor data ranges overlap at byte ", ranges[i].first));
    }
  }
  return header;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": fstat: ", std::strerror(errno)));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    file->mapping_ = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  }
  ::close(fd);
  if (file->mapping_ == MAP_FAILED) {
    file->mapping_ = nullptr;
    return absl::InternalError(absl::StrCat(path, ": mmap: ", std::strerror(errno)));
  }
  const absl::string_view bytes(static_cast<const char*>(file->mapping_), file->size_);
  auto header = ParseSafetensorsHeader(bytes, file->size_, path);
  if (!header.ok()) return header.status();
  file->header_ = *std::move(header);
  for (size_t i = 0; i < file->header_.tensors.size(); ++i) {
    file->index_[file->header_.tensors[i].name] = i;
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) munmap(mapping_, size_);
}

const TensorInfo* SafetensorsFile::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

absl::Span<const uint8_t> SafetensorsFile::Data(const TensorInfo& tensor) const {
  const uint8_t* base = static_cast<const uint8_t*>(mapping_) + header_.data_offset;
  return absl::Span<const uint8_t>(base + tensor.begin, tensor.end - tensor.begin);
}

absl::string_view SafetensorsFile::header_bytes() const {
  return absl::string_view(static_cast<const char*>(mapping_), header_.data_offset);
}

}  // namespace pdserve::engine
