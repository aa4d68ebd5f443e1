// The engine's backend interface: a loaded model that runs one forward pass over a packed
// batch, reading and writing a paged KV pool. The CPU backend implements it today; a CUDA
// backend slots in beside it behind the same interface (selected at start).
// Thread-safety: Forward() runs one batch at a time (the caller's step loop owns it);
// accessors are safe from any thread.
#ifndef PDSERVE_ENGINE_MODEL_H_
#define PDSERVE_ENGINE_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/kv_layout.h"
#include "common/model_config.h"
#include "engine/batch.h"
#include "engine/sampling.h"
#include "kvcache/kv_pool.h"

namespace pdserve::engine {

// How to sample one logits row: SampleToken's config and the position the token will take.
struct RowSampling {
  const text::SamplingConfig* config = nullptr;
  uint64_t position = 0;
};

struct ForwardOptions {
  // Called as soon as layer `layer`'s K/V for every token of the batch is in the pool
  // (before that layer's attention and MLP run). The prefill worker ships the layer from
  // here while the next layers compute. Returning false cancels the forward pass (the call
  // returns CANCELLED); the hook should only enqueue work, it runs on the forward thread.
  std::function<bool(int layer)> layer_hook;
  // One entry per logits row (the sequences that want logits, in batch order). A backend that
  // samples on the device fills Logits::sampled from these and skips copying the logits out;
  // one that does not ignores them (ForwardAndSample samples on the host).
  absl::Span<const RowSampling> sample_rows;
};

// The KV pool a backend needs, where it is not the operator's choice (0: no preference).
struct KvPoolHint {
  int block_size = 0;
  int num_blocks = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;
  // Hash of config and weights: KV from models with different fingerprints never mixes.
  virtual uint64_t fingerprint() const = 0;
  // Bytes of weights the forward pass streams (the decode bandwidth floor's numerator).
  virtual size_t weight_bytes() const = 0;
  // Bytes the model's parameters occupy (weights as stored, the embedding table, norms and
  // biases): what a memory budget must count.
  virtual size_t memory_bytes() const = 0;
  virtual std::string backend_name() const = 0;
  // The instruction set the forward pass runs on, for logs, benchmarks and build info: the
  // CPU backend's "avx512", "avx2" or "scalar" (cpu/cpu_isa.h); other backends their name.
  virtual std::string instruction_set() const { return backend_name(); }

  // Runs the batch: writes every token's K/V into `pool` and fills `logits` with one row
  // per sequence that wants logits. InvalidArgument for a malformed batch (bad token id,
  // block table too short or out of range), CANCELLED if the layer hook asked to stop.
  virtual absl::Status Forward(const PackedBatch& batch, kvcache::KvPool& pool,
                               const ForwardOptions& options, Logits* logits) = 0;

  // A KV pool this model can read and write, zeroed: host memory for the CPU backend, device
  // memory for the CUDA one.
  virtual absl::StatusOr<std::unique_ptr<kvcache::KvPool>> AllocateKvPool(
      const KvLayout& layout) const {
    return kvcache::KvPool::Allocate(layout);
  }
  // Whether AllocateKvPool's memory is on a device (host code must not touch it).
  virtual bool kv_pool_on_device() const { return false; }
  // The pool geometry the backend stands for (the emulated backend: its profile's block size
  // and pool); flags that disagree are an error at start.
  virtual KvPoolHint kv_pool_hint() const { return {}; }

  // What every backend's Forward checks first: the pool's geometry is this model's, and the
  // batch is well formed for it (PackedBatch::Validate).
  absl::Status CheckForwardInputs(const PackedBatch& batch, const kvcache::KvPool& pool) const {
    const ModelConfig& c = config();
    const KvLayout& layout = pool.layout();
    if (layout.num_layers != c.num_layers || layout.num_kv_heads != c.num_kv_heads ||
        layout.head_dim != c.head_dim) {
      return absl::FailedPreconditionError(absl::StrCat(
          "kv pool geometry (", layout.DebugString(), ") does not match the model (layers=",
          c.num_layers, " kv_heads=", c.num_kv_heads, " head_dim=", c.head_dim, ")"));
    }
    return batch.Validate(layout, c.vocab_size, c.max_position_embeddings);
  }

  // The KV geometry this model reads and writes.
  KvLayout MakeKvLayout(int num_blocks, int block_size, DType dtype) const {
    KvLayout layout;
    layout.num_layers = config().num_layers;
    layout.num_kv_heads = config().num_kv_heads;
    layout.head_dim = config().head_dim;
    layout.block_size = block_size;
    layout.dtype = dtype;
    layout.num_blocks = num_blocks;
    return layout;
  }
};

// Runs the batch and samples each logits row's next token into logits->sampled: on the
// device where the backend does, else here with SampleToken (the same rule and random stream).
// `rows` must have one entry per sequence that wants logits.
absl::Status ForwardAndSample(Model& model, const PackedBatch& batch, kvcache::KvPool& pool,
                              ForwardOptions options, absl::Span<const RowSampling> rows,
                              Logits* logits, SamplerScratch* scratch);

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_MODEL_H_
