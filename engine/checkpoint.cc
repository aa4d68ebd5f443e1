#include "engine/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "engine/half.h"
#include "nlohmann/json.hpp"

namespace pdserve::engine {
namespace {

using nlohmann::json;

// Tensors some exporters include that carry no weights we need.
bool IsIgnorable(absl::string_view name) { return absl::EndsWith(name, "rotary_emb.inv_freq"); }

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->dir_ = dir;
  ASSIGN_OR_RETURN(ckpt->config_json_, ReadFileToString(dir + "/config.json"));
  auto config = ModelConfig::FromJson(ckpt->config_json_);
  if (!config.ok()) return Annotate(config.status(), dir);
  ckpt->config_ = *std::move(config);
  RETURN_IF_ERROR(ckpt->OpenShards());

  // Fingerprint: config, then every tensor in name order.
  Xxh64State hash(0x70647365727665ULL);  // "pdserve"
  hash.Update(ckpt->config_json_);
  std::map<std::string, Location> sorted(ckpt->tensors_.begin(), ckpt->tensors_.end());
  for (const auto& [name, loc] : sorted) {
    hash.Update(name);
    hash.Update(loc.info->dtype_name);
    for (int64_t d : loc.info->shape) hash.Update(&d, sizeof(d));
    const auto data = loc.file->Data(*loc.info);
    hash.Update(data.data(), data.size());
  }
  ckpt->fingerprint_ = hash.Digest();
  return ckpt;
}

absl::Status Checkpoint::OpenShards() {
  const std::string single = dir_ + "/model.safetensors";
  const std::string index_path = dir_ + "/model.safetensors.index.json";
  std::vector<std::string> shard_names;
  json weight_map;
  if (std::filesystem::exists(index_path)) {
    ASSIGN_OR_RETURN(std::string index_text, ReadFileToString(index_path));
    const json index = json::parse(index_text, nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": expected an object with a \"weight_map\" object"));
    }
    weight_map = index["weight_map"];
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
      if (!it.value().is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path, ": weight_map[\"", it.key(), "\"] is not a file name"));
      }
      const std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path, ": shard name '", shard, "' must be a plain file name"));
      }
      if (std::find(shard_names.begin(), shard_names.end(), shard) == shard_names.end()) {
        shard_names.push_back(shard);
      }
    }
  } else if (std::filesystem::exists(single)) {
    shard_names.push_back("model.safetensors");
  } else {
    return absl::NotFoundError(
        absl::StrCat(dir_, ": no model.safetensors or model.safetensors.index.json"));
  }
  for (const std::string& shard : shard_names) {
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(dir_ + "/" + shard));
    for (const TensorInfo& info : file->tensors()) {
      if (tensors_.contains(info.name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(file->path(), ": tensor '", info.name, "' appears in two shards"));
      }
      tensors_[info.name] = Location{file.get(), &info};
    }
    files_.push_back(std::move(file));
  }
  if (!weight_map.is_null()) {
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
      auto found = tensors_.find(it.key());
      if (found == tensors_.end() || std::filesystem::path(found->second.file->path()).filename() !=
                                         it.value().get<std::string>()) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir_, ": tensor '", it.key(), "' is listed in ",
                         it.value().get<std::string>(), " by the index but is not in that file"));
      }
    }
  }
  return absl::OkStatus();
}

TensorDType Checkpoint::DTypeOf(absl::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? TensorDType::kUnsupported : it->second.info->dtype;
}

absl::Status Checkpoint::ReadF32(absl::string_view name, absl::Span<const int64_t> shape,
                                 float* out) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(dir_, ": missing tensor '", name, "' (expected shape ",
                                            ShapeString(shape), ")"));
  }
  const TensorInfo& info = *it->second.info;
  if (!std::equal(info.shape.begin(), info.shape.end(), shape.begin(), shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": tensor '", name, "' has shape ",
                                                   ShapeString(info.shape), ", expected ",
                                                   ShapeString(shape)));
  }
  const auto data = it->second.file->Data(info);
  const size_t n = static_cast<size_t>(info.num_elements());
  const auto* raw16 = reinterpret_cast<const uint16_t*>(data.data());
  switch (info.dtype) {
    case TensorDType::kF32:
      std::memcpy(out, data.data(), n * sizeof(float));
      break;
    case TensorDType::kF16:
      HalfToFloat(raw16, out, n);
      break;
    case TensorDType::kBF16:
      Bf16ToFloat(raw16, out, n);
      break;
    case TensorDType::kUnsupported:
      return absl::InvalidArgumentError(absl::StrCat(dir_, ": tensor '", name, "' has dtype ",
                                                     info.dtype_name,
                                                     ", expected one of F32, F16, BF16"));
  }
  read_.insert(std::string(name));
  return absl::OkStatus();
}

std::vector<std::string> Checkpoint::Unread() const {
  std::vector<std::string> out;
  for (const auto& [name, loc] : tensors_) {
    if (!read_.contains(name) && !IsIgnorable(name)) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace pdserve::engine
