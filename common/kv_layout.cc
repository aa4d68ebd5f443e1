#include "common/kv_layout.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pdserve {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
  }
  return "unknown";
}

bool ParseDType(absl::string_view text, DType* out) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "f32" || lower == "float32" || lower == "float") {
    *out = DType::kF32;
  } else if (lower == "f16" || lower == "float16" || lower == "half") {
    *out = DType::kF16;
  } else if (lower == "bf16" || lower == "bfloat16") {
    *out = DType::kBF16;
  } else {
    return false;
  }
  return true;
}

absl::Status KvLayout::Validate() const {
  auto positive = [](absl::string_view name, int v) -> absl::Status {
    if (v <= 0)
      return absl::InvalidArgumentError(
          absl::StrCat("kv layout: ", name, " = ", v, " must be > 0"));
    return absl::OkStatus();
  };
  for (auto [name, v] : {std::pair<absl::string_view, int>{"num_layers", num_layers},
                         {"num_kv_heads", num_kv_heads},
                         {"head_dim", head_dim},
                         {"block_size", block_size},
                         {"num_blocks", num_blocks}}) {
    if (absl::Status s = positive(name, v); !s.ok()) return s;
  }
  if ((block_size & (block_size - 1)) != 0 || block_size > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv layout: block_size = ", block_size, " must be a power of two <= 1024"));
  }
  if (DTypeSize(dtype) == 0) return absl::InvalidArgumentError("kv layout: unknown dtype");
  if (static_cast<double>(region_bytes()) * num_blocks * 2 * num_layers > 1099511627776.0) {
    return absl::InvalidArgumentError("kv layout: pool would exceed 1 TiB");
  }
  return absl::OkStatus();
}

bool KvLayout::SameGeometry(const KvLayout& o) const { return GeometryMismatch(o).empty(); }

std::string KvLayout::GeometryMismatch(const KvLayout& o) const {
  if (num_layers != o.num_layers)
    return absl::StrCat("num_layers ", num_layers, " vs ", o.num_layers);
  if (num_kv_heads != o.num_kv_heads)
    return absl::StrCat("num_kv_heads ", num_kv_heads, " vs ", o.num_kv_heads);
  if (head_dim != o.head_dim) return absl::StrCat("head_dim ", head_dim, " vs ", o.head_dim);
  if (block_size != o.block_size)
    return absl::StrCat("block_size ", block_size, " vs ", o.block_size);
  if (dtype != o.dtype) return absl::StrCat("dtype ", DTypeName(dtype), " vs ", DTypeName(o.dtype));
  return "";
}

std::string KvLayout::DebugString() const {
  return absl::StrCat("layers=", num_layers, " kv_heads=", num_kv_heads, " head_dim=", head_dim,
                      " block_size=", block_size, " dtype=", DTypeName(dtype),
                      " blocks=", num_blocks);
}

}  // namespace pdserve
