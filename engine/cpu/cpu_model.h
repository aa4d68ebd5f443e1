// The CPU backend: a Llama-family decoder (Llama 2/3, Mistral, Qwen2, Qwen3) with its matrices
// kept in the checkpoint's type (float32, bfloat16 or float16; or one chosen at load) and
// widened to float32 in registers, projections and MLP through the batch-invariant packed
// GEMM, and paged attention per sequence. q/k/v and gate/up projections are fused into one
// GEMM each. Norm weights, biases and activations are float32.
// Thread-safety: Forward() is called by one thread at a time (it reuses scratch buffers and
// drives the internal thread pool); the rest is immutable after Load().
#ifndef PDSERVE_ENGINE_CPU_CPU_MODEL_H_
#define PDSERVE_ENGINE_CPU_CPU_MODEL_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/checkpoint.h"
#include "engine/cpu/aligned_buffer.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/cpu_isa.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/thread_pool.h"
#include "engine/model.h"

namespace pdserve::engine {

struct CpuModelOptions {
  // Threads for the forward pass, including the caller. 0 means one per hardware thread.
  // Default 0.
  int num_threads = 0;
  // How the matrices (and the embedding table) are stored; unset: as the checkpoint stores
  // its embedding table (its dtype). Default unset.
  std::optional<WeightType> weight_type;
  // The instruction set of the kernels; unset: DefaultCpuIsa() (the best this CPU has, unless
  // $PDSERVE_MAX_CPU_ISA caps it). One the CPU lacks fails Load. Default unset.
  std::optional<CpuIsa> isa;
};

class CpuModel final : public Model {
 public:
  static absl::StatusOr<std::unique_ptr<CpuModel>> Load(Checkpoint& checkpoint,
                                                        const CpuModelOptions& options);

  const ModelConfig& config() const override { return config_; }
  uint64_t fingerprint() const override { return fingerprint_; }
  size_t weight_bytes() const override { return weight_bytes_; }
  size_t memory_bytes() const override { return memory_bytes_; }
  std::string backend_name() const override { return "cpu"; }
  std::string instruction_set() const override { return CpuIsaName(isa_); }
  int num_threads() const { return pool_->size(); }
  WeightType weight_type() const { return weight_type_; }
  CpuIsa isa() const { return isa_; }

  absl::Status Forward(const PackedBatch& batch, kvcache::KvPool& pool,
                       const ForwardOptions& options, Logits* logits) override;

 private:
  struct Layer {
    std::vector<float> input_norm, post_norm, q_norm, k_norm;
    std::vector<float> qkv_bias, o_bias, gate_up_bias, down_bias;
    PackedMatrix qkv;      // [q_dim + 2 kv_dim, hidden]
    PackedMatrix o;        // [hidden, q_dim]
    PackedMatrix gate_up;  // [2 intermediate, hidden]: gate rows, then up rows
    PackedMatrix down;     // [hidden, intermediate]
  };
  CpuModel() = default;
  absl::Status LoadWeights(Checkpoint& checkpoint);
  // Runs fn(row) for rows [0, n), in parallel when there are enough rows.
  void ForRows(int n, const std::function<void(int)>& fn);
  void WriteKv(kvcache::KvPool& pool, int layer, const float* k, const float* v,
               const BatchSequence& seq, int position);

  ModelConfig config_;
  uint64_t fingerprint_ = 0;
  size_t weight_bytes_ = 0;
  size_t memory_bytes_ = 0;
  WeightType weight_type_ = WeightType::kF32;
  CpuIsa isa_ = CpuIsa::kScalar;
  AlignedBuffer<uint8_t> embed_;  // [vocab, hidden] of weight_type_ (rows in order)
  std::vector<float> final_norm_;
  PackedMatrix lm_head_;  // [vocab, hidden]
  std::vector<Layer> layers_;
  std::vector<double> inv_freq_;  // [head_dim / 2]
  std::unique_ptr<ThreadPool> pool_;

  // Scratch, grown to the largest batch seen.
  AlignedBuffer<float> x_, h_, qkv_, attn_, tmp_, gate_up_, act_, rope_cos_, rope_sin_;
  std::vector<int32_t> token_seq_, token_pos_;
  struct AttentionUnit {
    int seq, kv_head, token_begin, token_end;
  };
  std::vector<AttentionUnit> attention_units_;
  std::vector<AttentionScratch> attention_scratch_;        // One per worker.
  std::vector<std::vector<AttentionRow>> attention_rows_;  // One per worker.
};

}  // namespace pdserve::engine

#endif  // PDSERVE_ENGINE_CPU_CPU_MODEL_H_
