// Sampling on the device: one thread block per logits row picks the row's next token by
// SampleToken's rule and random stream (engine/sampling.h), greedy by argmax, the rest by the
// threshold selection of engine/sample_select.h, so the logits never leave the device.
// Thread-safety: stateless; launches on one stream run in order.
#ifndef PDSERVE_ENGINE_CUDA_SAMPLER_H_
#define PDSERVE_ENGINE_CUDA_SAMPLER_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "engine/sample_select.h"

namespace pdserve::engine::cuda {

struct DeviceRowSampling {
  select::RowSamplingParams params;
  int32_t greedy = 0;  // text::SamplingConfig::greedy(): argmax, lowest id among ties.
};

// out[r] = the token sampled from logits row r ([rows, vocab], device memory) with rows[r]
// (device memory). `probs` is [rows, vocab] device scratch (may alias `logits`, which is then
// overwritten).
absl::Status SampleRowsOnDevice(const float* logits, int rows, int vocab,
                                const DeviceRowSampling* params, float* probs, int32_t* out,
                                cudaStream_t stream);

}  // namespace pdserve::engine::cuda

#endif  // PDSERVE_ENGINE_CUDA_SAMPLER_H_
