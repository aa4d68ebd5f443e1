#include "engine/model.h"

namespace pdserve::engine {

absl::Status ForwardAndSample(Model& model, const PackedBatch& batch, kvcache::KvPool& pool,
                              ForwardOptions options, absl::Span<const RowSampling> rows,
                              Logits* logits, SamplerScratch* scratch) {
  const int want = batch.num_logit_rows();
  if (static_cast<int>(rows.size()) != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample_rows: ", rows.size(), " entries for ", want, " logits rows"));
  }
  for (const RowSampling& r : rows) {
    if (r.config == nullptr) return absl::InvalidArgumentError("sample_rows: a row has no config");
  }
  options.sample_rows = rows;
  logits->sampled.clear();
  const absl::Status status = model.Forward(batch, pool, options, logits);
  if (!status.ok()) return status;
  if (static_cast<int>(logits->sampled.size()) == want) return absl::OkStatus();
  // The backend returned logits: sample them here.
  logits->sampled.resize(want);
  for (int r = 0; r < want; ++r) {
    logits->sampled[r] = SampleToken(logits->Row(r), *rows[r].config, rows[r].position, scratch);
  }
  return absl::OkStatus();
}

}  // namespace pdserve::engine
