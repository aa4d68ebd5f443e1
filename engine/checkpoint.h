// A Hugging Face checkpoint directory: config.json plus either model.safetensors or
// model.safetensors.index.json and its shards. Tensors are memory-mapped and converted to
// float32 on request, after their shape and dtype are checked.
// The fingerprint hashes config.json and every tensor (name, dtype, shape, bytes); two
// workers share KV only when their fingerprints match.
// Thread-safety: ReadF32 may be called from one thread at a time.
#ifndef PDSERVE_ENGINE_CHECKPOINT_H_
#define PDSERVE_ENGINE_CHECKPOINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model_config.h"
#include "common/read_file.h"
#include "engine/safetensors.h"

namespace pdserve::engine {

class Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  uint64_t fingerprint() const { return fingerprint_; }
  bool Has(absl::string_view name) const { return tensors_.contains(name); }
  // The stored type of tensor `name` (kUnsupported when absent).
  TensorDType DTypeOf(absl::string_view name) const;

  // Converts tensor `name` to float32 into `out` (shape-product floats). Errors name the
  // tensor and the expected versus found shape or dtype.
  absl::Status ReadF32(absl::string_view name, absl::Span<const int64_t> shape, float* out);
  // Tensors present in the files that nobody read (unexpected tensors), sorted.
  std::vector<std::string> Unread() const;

 private:
  struct Location {
    const SafetensorsFile* file;
    const TensorInfo* info;
  };
  Checkpoint() = default;
  absl::Status OpenShards();

  std::string dir_;
  ModelConfig config_;
  std::string config_json_;
  uint64_t fingerprint_ = 0;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  absl::flat_hash_map<std::string, Location> tensors_;
  absl::flat_hash_set<std::string> read_;
};

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_CHECKPOINT_H_
