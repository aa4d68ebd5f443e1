#include "kvtransfer/kv_transport.h"

#include "absl/strings/str_cat.h"
#include "common/hash.h"

namespace pdserve::kvtransfer {

const char* DataPathName(DataPath path) {
  switch (path) {
    case DataPath::kPut:
      return "put";
    case DataPath::kActiveMessage:
      return "am";
    case DataPath::kMemcpy:
      return "memcpy";
  }
  return "unknown";
}

absl::Status ValidateTarget(const TransferTarget& target, const KvLayout& source_layout,
                            uint64_t source_fingerprint) {
  const KvLayout& dst = target.pool.layout;
  if (std::string mismatch = source_layout.GeometryMismatch(dst); !mismatch.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("kv transfer: layout mismatch with receiver ",
                                                      target.pool.receiver_id, ": ", mismatch,
                                                      " (sender vs receiver)"));
  }
  if (target.pool.model_fingerprint != source_fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kv transfer: model fingerprint mismatch with receiver ", target.pool.receiver_id, ": ",
        absl::Hex(source_fingerprint), " vs ", absl::Hex(target.pool.model_fingerprint)));
  }
  if (target.block_ids.empty())
    return absl::InvalidArgumentError("target.block_ids: must not be empty");
  for (size_t i = 0; i < target.block_ids.size(); ++i) {
    const int32_t b = target.block_ids[i];
    if (b < 0 || b >= dst.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("target.block_ids[", i, "]: block ", b,
                                                     " is outside the receiver's pool [0, ",
                                                     dst.num_blocks, ")"));
    }
  }
  return absl::OkStatus();
}

std::vector<BlockRun> CoalesceRuns(absl::Span<const int32_t> source,
                                   absl::Span<const int32_t> target) {
  std::vector<BlockRun> runs;
  for (size_t i = 0; i < source.size() && i < target.size(); ++i) {
    if (!runs.empty()) {
      BlockRun& last = runs.back();
      if (source[i] == last.source_first + last.count &&
          target[i] == last.target_first + last.count) {
        ++last.count;
        continue;
      }
    }
    runs.push_back(BlockRun{source[i], target[i], 1});
  }
  return runs;
}

uint64_t HashBlocks(absl::Span<const int32_t> blocks) {
  return Xxh64(blocks.data(), blocks.size() * sizeof(int32_t), 0x626c6f636b73ULL);
}

uint64_t HashLayout(const KvLayout& l, uint64_t fingerprint) {
  const int64_t fields[] = {l.num_layers,
                            l.num_kv_heads,
                            l.head_dim,
                            l.block_size,
                            static_cast<int64_t>(l.dtype),
                            static_cast<int64_t>(fingerprint)};
  return Xxh64(fields, sizeof(fields), 0x6c61796f7574ULL);
}

}  // namespace pdserve::kvtransfer
