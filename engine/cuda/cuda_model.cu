#include <cublas_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/cuda_util.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/paged_attention.h"
#include "engine/cuda/sampler.h"
#include "engine/half.h"
#include "engine/llama_weights.h"

namespace pdserve::engine::cuda {
namespace {

double GiB(size_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

size_t RoundUpToPowerOfTwo(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// A weight matrix in device memory in the model's weight type: f32, or f16/bf16 bits.
struct DeviceWeight {
  DType dtype = DType::kF32;
  DeviceArray<float> f32;
  DeviceArray<uint16_t> half;

  absl::Status Upload(const std::vector<float>& host, DType type) {
    dtype = type;
    if (type == DType::kF32) return f32.Upload(host);
    std::vector<uint16_t> narrow(host.size());
    if (type == DType::kBF16) {
      FloatToBf16(host.data(), narrow.data(), host.size());
    } else {
      FloatToHalf(host.data(), narrow.data(), host.size());
    }
    return half.Upload(narrow);
  }
  const void* data() const {
    return dtype == DType::kF32 ? static_cast<const void*>(f32.get()) : half.get();
  }
  size_t bytes() const {
    return dtype == DType::kF32 ? f32.size() * sizeof(float) : half.size() * sizeof(uint16_t);
  }
};

cudaDataType_t CudaType(DType type) {
  switch (type) {
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF32:
      break;
  }
  return CUDA_R_32F;
}

class CudaModel final : public Model {
 public:
  ~CudaModel() override {
    for (auto& [key, step] : graphs_) {
      if (step.exec != nullptr) cudaGraphExecDestroy(step.exec);
    }
    if (cublas_ != nullptr) blas_.destroy(cublas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (host_staging_ != nullptr) cudaFreeHost(host_staging_);
  }

  static absl::StatusOr<std::unique_ptr<Model>> Load(Checkpoint& ckpt,
                                                     const CudaModelOptions& options) {
    std::unique_ptr<CudaModel> m(new CudaModel());
    m->config_ = ckpt.config();
    m->fingerprint_ = ckpt.fingerprint();
    const ModelConfig& c = m->config_;
    if (c.head_dim > kMaxAttentionHeadDim || c.head_dim % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("backend cuda: head_dim ", c.head_dim,
                                                     " is not supported (even, at most ",
                                                     kMaxAttentionHeadDim, ")"));
    }
    RETURN_IF_ERROR(CudaOk(cudaSetDevice(options.device), "cudaSetDevice"));
    size_t free_bytes = 0, total_bytes = 0;
    RETURN_IF_ERROR(CudaOk(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
    m->weight_dtype_ = options.weight_dtype;
    m->split_k_partition_ = options.split_k_partition;
    m->graph_batch_sizes_ = options.graph_batch_sizes;
    RETURN_IF_ERROR(CudaOk(
        cudaDeviceGetAttribute(&m->sm_count_, cudaDevAttrMultiProcessorCount, options.device),
        "cudaDeviceGetAttribute"));
    const size_t need = CudaWeightBytes(c, options.weight_dtype);
    if (need > free_bytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "backend cuda: the model's %s weights need %.2f GiB of device memory; device %d "
          "has %.2f GiB free of %.2f GiB",
          DTypeName(options.weight_dtype), GiB(need), options.device, GiB(free_bytes),
          GiB(total_bytes)));
    }
    ASSIGN_OR_RETURN(m->blas_, CublasLibrary::Open());
    RETURN_IF_ERROR(CudaOk(cudaStreamCreate(&m->stream_), "cudaStreamCreate"));
    RETURN_IF_ERROR(CublasOk(m->blas_.create(&m->cublas_), "cublasCreate"));
    RETURN_IF_ERROR(CublasOk(m->blas_.set_stream(m->cublas_, m->stream_), "cublasSetStream"));
    constexpr size_t kCublasWorkspace = 32 << 20;
    RETURN_IF_ERROR(m->cublas_workspace_.Reserve(kCublasWorkspace));
    RETURN_IF_ERROR(
        CublasOk(m->blas_.set_workspace(m->cublas_, m->cublas_workspace_.get(), kCublasWorkspace),
                 "cublasSetWorkspace"));
    // f32 is the checking mode: strict FP32, as the CPU engine (TF32 would be 1e-3 off per
    // product). Half weights run on tensor cores with f32 accumulation.
    RETURN_IF_ERROR(CublasOk(m->blas_.set_math_mode(m->cublas_, options.weight_dtype == DType::kF32
                                                                    ? CUBLAS_PEDANTIC_MATH
                                                                    : CUBLAS_DEFAULT_MATH),
                             "cublasSetMathMode"));
    RETURN_IF_ERROR(m->LoadWeights(ckpt));
    const std::vector<std::string> unread = ckpt.Unread();
    if (!unread.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(ckpt.dir(), ": ", unread.size(), " unexpected tensor(s), e.g. ", unread[0]));
    }
    m->inv_freq_ = RopeInverseFrequencies(c);
    return std::unique_ptr<Model>(std::move(m));
  }

  const ModelConfig& config() const override { return config_; }
  uint64_t fingerprint() const override { return fingerprint_; }
  size_t weight_bytes() const override { return weight_bytes_; }
  size_t memory_bytes() const override { return memory_bytes_; }
  std::string backend_name() const override { return "cuda"; }
  bool kv_pool_on_device() const override { return true; }
  CudaGraphStats graph_stats() const { return {graphs_captured_, graph_replays_}; }
  DType weight_dtype() const { return weight_dtype_; }

  absl::StatusOr<std::unique_ptr<kvcache::KvPool>> AllocateKvPool(
      const KvLayout& layout) const override {
    RETURN_IF_ERROR(layout.Validate());
    void* base = nullptr;
    const size_t bytes = layout.pool_bytes();
    if (cudaMalloc(&base, bytes) != cudaSuccess) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      return absl::ResourceExhaustedError(absl::StrFormat(
          "backend cuda: the KV pool (%d blocks) needs %.2f GiB of device memory; %.2f GiB is "
          "free (lower --num_blocks or --kv_cache_bytes)",
          layout.num_blocks, GiB(bytes), GiB(free_bytes)));
    }
    std::shared_ptr<void> owner(base, [](void* p) { cudaFree(p); });
    RETURN_IF_ERROR(CudaOk(cudaMemset(base, 0, bytes), "cudaMemset"));
    return kvcache::KvPool::Wrap(layout, base, bytes, std::move(owner));
  }

  absl::Status Forward(const PackedBatch& batch, kvcache::KvPool& pool,
                       const ForwardOptions& options, Logits* logits) override;

 private:
  struct Layer {
    DeviceArray<float> input_norm, post_norm, q_norm, k_norm;
    DeviceArray<float> qkv_bias, o_bias, gate_up_bias, down_bias;
    DeviceWeight qkv, o, gate_up, down;
  };

  CudaModel() = default;
  absl::Status LoadWeights(Checkpoint& ckpt);
  // out[rows, n] = in[rows, k] x w[n, k]^T (row-major), on the stream.
  absl::Status Linear(const float* in, int rows, int k, const DeviceWeight& w, int n, float* out);
  absl::Status Stage(const PackedBatch& batch, const KvLayout& layout,
                     absl::Span<const RowSampling> sample_rows);
  absl::Status EnqueueModel(int T, int R, const SplitK& split, kvcache::KvPool& pool,
                            const std::function<bool(int)>* layer_hook);
  absl::Status RunModel(const PackedBatch& batch, int T, int R, const SplitK& split,
                        kvcache::KvPool& pool);
  // What a captured graph has baked in: every buffer's address and the pool's geometry.
  std::vector<uintptr_t> GraphInputs(const kvcache::KvPool& pool) const;

  struct CapturedStep {
    cudaGraphExec_t exec = nullptr;
    std::vector<uintptr_t> inputs;
    int eager_runs = 0;
  };

  ModelConfig config_;
  uint64_t fingerprint_ = 0;
  size_t weight_bytes_ = 0;
  size_t memory_bytes_ = 0;
  std::vector<double> inv_freq_;
  CublasLibrary blas_;  // The library stays loaded for the process (it is never dlclosed).
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  DType weight_dtype_ = DType::kF32;
  DeviceWeight embed_, lm_head_;
  DeviceArray<float> final_norm_;
  DeviceArray<uint16_t> narrow_;  // Activations rounded to the weight type for a half GEMM.
  std::vector<Layer> layers_;
  // Scratch, grown to the largest batch seen.
  DeviceArray<float> x_, h_, qkv_, attn_, tmp_, gate_up_, act_, rope_cos_, rope_sin_, logits_;
  DeviceArray<int32_t> tokens_, token_seq_, token_pos_, table_offset_, tables_, logit_rows_;
  DeviceArray<DeviceRowSampling> sample_params_;
  DeviceArray<float> partials_;  // Split-K attention states.
  int split_k_partition_ = 0;
  int sm_count_ = 1;
  std::vector<int> graph_batch_sizes_;
  std::map<std::pair<int, int>, CapturedStep> graphs_;  // By (batch size, partitions).
  int64_t graphs_captured_ = 0;
  int64_t graph_replays_ = 0;
  DeviceArray<uint8_t> cublas_workspace_;  // Fixed, so cuBLAS never allocates in a capture.
  DeviceArray<int32_t> sampled_;
  void* host_staging_ = nullptr;  // Pinned: the batch's index arrays on their way up.
  size_t host_staging_bytes_ = 0;
  int logit_row_count_ = 0;
};

absl::Status CudaModel::LoadWeights(Checkpoint& ckpt) {
  std::vector<float> embed, final_norm, lm_head;
  RETURN_IF_ERROR(ReadLlamaEmbeddings(ckpt, &embed, &final_norm, &lm_head));
  RETURN_IF_ERROR(embed_.Upload(embed, weight_dtype_));
  RETURN_IF_ERROR(final_norm_.Upload(final_norm));
  RETURN_IF_ERROR(lm_head_.Upload(lm_head, weight_dtype_));
  weight_bytes_ = lm_head_.bytes();
  memory_bytes_ = embed_.bytes() + lm_head_.bytes() + final_norm.size() * sizeof(float);
  layers_.resize(config_.num_layers);
  LlamaLayerWeights w;
  for (int l = 0; l < config_.num_layers; ++l) {
    RETURN_IF_ERROR(ReadLlamaLayer(ckpt, l, &w));
    Layer& d = layers_[l];
    const std::pair<DeviceArray<float>*, const std::vector<float>*> parts[] = {
        {&d.input_norm, &w.input_norm},
        {&d.post_norm, &w.post_norm},
        {&d.q_norm, &w.q_norm},
        {&d.k_norm, &w.k_norm},
        {&d.qkv_bias, &w.qkv_bias},
        {&d.o_bias, &w.o_bias},
        {&d.gate_up_bias, &w.gate_up_bias},
        {&d.down_bias, &w.down_bias}};
    for (const auto& [device, host] : parts) {
      RETURN_IF_ERROR(device->Upload(*host));
      memory_bytes_ += host->size() * sizeof(float);
    }
    const std::pair<DeviceWeight*, const std::vector<float>*> matrices[] = {
        {&d.qkv, &w.qkv}, {&d.o, &w.o}, {&d.gate_up, &w.gate_up}, {&d.down, &w.down}};
    for (const auto& [device, host] : matrices) {
      RETURN_IF_ERROR(device->Upload(*host, weight_dtype_));
      weight_bytes_ += device->bytes();
      memory_bytes_ += device->bytes();
    }
  }
  return absl::OkStatus();
}

absl::Status CudaModel::Linear(const float* in, int rows, int k, const DeviceWeight& w, int n,
                               float* out) {
  // Row-major out[rows, n] is column-major out^T[n, rows] = W x in^T, with row-major W[n, k]
  // read as column-major W^T[k, n] and transposed, and row-major in[rows, k] as column-major
  // in^T[k, rows].
  const float one = 1.0f, zero = 0.0f;
  if (w.dtype == DType::kF32) {
    return CublasOk(blas_.sgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &one, w.f32.get(), k,
                                in, k, &zero, out, n),
                    "sgemm");
  }
  // Half weights: the activations rounded to the same type, f32 accumulation and output.
  const int64_t elements = static_cast<int64_t>(rows) * k;
  RETURN_IF_ERROR(narrow_.Reserve(elements));
  RETURN_IF_ERROR(Narrow(in, elements, w.dtype, narrow_.get(), stream_));
  const cudaDataType_t type = CudaType(w.dtype);
  return CublasOk(blas_.gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &one, w.data(), type,
                                k, narrow_.get(), type, k, &zero, out, CUDA_R_32F, n,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "gemmEx");
}

// Uploads the batch's tokens, positions, block tables, logit rows, rotary tables and the rows'
// sampling parameters.
absl::Status CudaModel::Stage(const PackedBatch& batch, const KvLayout& layout,
                              absl::Span<const RowSampling> sample_rows) {
  const int T = batch.num_tokens();
  const int S = batch.num_sequences();
  const int half = config_.head_dim / 2;
  // The pinned buffer below may still feed copies of a forward that failed midway.
  RETURN_IF_ERROR(CudaOk(cudaStreamSynchronize(stream_), "synchronize"));
  std::vector<int32_t> seq(T), pos(T), offset(S), tables, rows;
  std::vector<float> cos(static_cast<size_t>(T) * half), sin(cos.size());
  for (int s = 0; s < S; ++s) {
    const BatchSequence& b = batch.sequences[s];
    offset[s] = static_cast<int32_t>(tables.size());
    const int needed =
        (b.start_position + b.num_tokens + layout.block_size - 1) / layout.block_size;
    tables.insert(tables.end(), b.block_table.begin(), b.block_table.begin() + needed);
    for (int i = 0; i < b.num_tokens; ++i) {
      const int t = batch.cu_seqlens[s] + i;
      seq[t] = s;
      pos[t] = b.start_position + i;
      for (int k = 0; k < half; ++k) {
        const double angle = pos[t] * inv_freq_[k];
        cos[static_cast<size_t>(t) * half + k] = static_cast<float>(std::cos(angle));
        sin[static_cast<size_t>(t) * half + k] = static_cast<float>(std::sin(angle));
      }
    }
    if (b.want_logits) rows.push_back(batch.cu_seqlens[s + 1] - 1);
  }
  logit_row_count_ = static_cast<int>(rows.size());
  std::vector<DeviceRowSampling> sampling(sample_rows.size());
  for (size_t r = 0; r < sample_rows.size(); ++r) {
    const text::SamplingConfig& c = *sample_rows[r].config;
    sampling[r].params =
        select::RowSamplingParams{c.temperature, c.top_p, c.top_k, c.seed, sample_rows[r].position};
    sampling[r].greedy = c.greedy() ? 1 : 0;
  }
  // Through one pinned buffer, in order; the copies are asynchronous on the stream, and the
  // buffer is only rewritten by the next Forward after this one synchronised.
  const std::pair<DeviceArray<int32_t>*, const std::vector<int32_t>*> ints[] = {
      {&tokens_, &batch.tokens}, {&token_seq_, &seq}, {&token_pos_, &pos},
      {&table_offset_, &offset}, {&tables_, &tables}, {&logit_rows_, &rows}};
  const std::pair<DeviceArray<float>*, const std::vector<float>*> floats[] = {{&rope_cos_, &cos},
                                                                              {&rope_sin_, &sin}};
  // The sampling parameters first: they hold 8-byte fields, the buffer's start is aligned.
  size_t bytes = sampling.size() * sizeof(DeviceRowSampling);
  for (const auto& [d, h] : ints) bytes += h->size() * sizeof(int32_t);
  for (const auto& [d, h] : floats) bytes += h->size() * sizeof(float);
  if (bytes > host_staging_bytes_) {
    if (host_staging_ != nullptr) cudaFreeHost(host_staging_);
    host_staging_ = nullptr;
    host_staging_bytes_ = 0;
    RETURN_IF_ERROR(CudaOk(cudaMallocHost(&host_staging_, bytes), "cudaMallocHost"));
    host_staging_bytes_ = bytes;
  }
  uint8_t* at = static_cast<uint8_t*>(host_staging_);
  auto up = [&](void* device, const void* host, size_t n) -> absl::Status {
    if (n == 0) return absl::OkStatus();
    std::memcpy(at, host, n);
    RETURN_IF_ERROR(
        CudaOk(cudaMemcpyAsync(device, at, n, cudaMemcpyHostToDevice, stream_), "upload"));
    at += n;
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(sample_params_.Reserve(std::max<size_t>(1, sampling.size())));
  RETURN_IF_ERROR(
      up(sample_params_.get(), sampling.data(), sampling.size() * sizeof(DeviceRowSampling)));
  for (const auto& [d, h] : ints) {
    // Powers of two: a growing block table keeps its address (and a captured graph) longer.
    RETURN_IF_ERROR(d->Reserve(RoundUpToPowerOfTwo(h->size())));
    RETURN_IF_ERROR(up(d->get(), h->data(), h->size() * sizeof(int32_t)));
  }
  for (const auto& [d, h] : floats) {
    RETURN_IF_ERROR(d->Reserve(std::max<size_t>(1, h->size())));
    RETURN_IF_ERROR(up(d->get(), h->data(), h->size() * sizeof(float)));
  }
  return absl::OkStatus();
}

// Enqueues the model from the embedding to the LM head's logits (logits_) for the staged
// batch: no host synchronisation unless a layer hook is given, so a decode step can be
// captured into a CUDA graph.
absl::Status CudaModel::EnqueueModel(int T, int R, const SplitK& split, kvcache::KvPool& pool,
                                     const std::function<bool(int)>* layer_hook) {
  const ModelConfig& c = config_;
  const KvLayout& layout = pool.layout();
  const int hidden = c.hidden_size;
  const int q_dim = c.q_dim();
  const int kv_dim = c.kv_dim();
  const int qkv_dim = q_dim + 2 * kv_dim;
  const int inter = c.intermediate_size;
  const int group = c.num_heads / c.num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const BatchView view{token_seq_.get(), token_pos_.get(), table_offset_.get(), tables_.get()};
  const PoolGeometry geometry{layout.num_blocks, layout.block_size, layout.num_kv_heads,
                              layout.head_dim};

  RETURN_IF_ERROR(
      EmbeddingGather(embed_.data(), embed_.dtype, tokens_.get(), T, hidden, x_.get(), stream_));
  for (int l = 0; l < c.num_layers; ++l) {
    Layer& w = layers_[l];
    RETURN_IF_ERROR(RmsNorm(x_.get(), hidden, w.input_norm.get(), c.rms_norm_eps, T, hidden,
                            h_.get(), hidden, stream_));
    RETURN_IF_ERROR(Linear(h_.get(), T, hidden, w.qkv, qkv_dim, qkv_.get()));
    if (c.qkv_bias)
      RETURN_IF_ERROR(AddBias(qkv_.get(), w.qkv_bias.get(), T, qkv_dim, qkv_dim, stream_));
    if (c.qk_norm) {
      RETURN_IF_ERROR(RmsNormHeads(qkv_.get(), T, qkv_dim, 0, c.num_heads, c.head_dim,
                                   w.q_norm.get(), c.rms_norm_eps, stream_));
      RETURN_IF_ERROR(RmsNormHeads(qkv_.get(), T, qkv_dim, q_dim, c.num_kv_heads, c.head_dim,
                                   w.k_norm.get(), c.rms_norm_eps, stream_));
    }
    RETURN_IF_ERROR(Rope(qkv_.get(), T, qkv_dim, 0, c.num_heads, c.head_dim, rope_cos_.get(),
                         rope_sin_.get(), stream_));
    RETURN_IF_ERROR(Rope(qkv_.get(), T, qkv_dim, q_dim, c.num_kv_heads, c.head_dim, rope_cos_.get(),
                         rope_sin_.get(), stream_));
    RETURN_IF_ERROR(WriteKv(qkv_.get(), qkv_dim, q_dim, kv_dim, l, geometry, view, T, layout.dtype,
                            pool.base(), stream_));
    if (layer_hook != nullptr) {
      // The hook's contract: the layer's K/V is in the pool when it fires.
      RETURN_IF_ERROR(CudaOk(cudaStreamSynchronize(stream_), "synchronize"));
      if (!(*layer_hook)(l))
        return absl::CancelledError(absl::StrCat("forward cancelled after layer ", l));
    }
    RETURN_IF_ERROR(PagedAttention(qkv_.get(), qkv_dim, c.num_heads, group, l, geometry, view, T,
                                   layout.dtype, pool.base(), scale, split, partials_.get(),
                                   attn_.get(), stream_));
    RETURN_IF_ERROR(Linear(attn_.get(), T, q_dim, w.o, hidden, tmp_.get()));
    if (c.o_bias) RETURN_IF_ERROR(AddBias(tmp_.get(), w.o_bias.get(), T, hidden, hidden, stream_));
    RETURN_IF_ERROR(AddInPlace(x_.get(), tmp_.get(), static_cast<int64_t>(T) * hidden, stream_));
    RETURN_IF_ERROR(RmsNorm(x_.get(), hidden, w.post_norm.get(), c.rms_norm_eps, T, hidden,
                            h_.get(), hidden, stream_));
    RETURN_IF_ERROR(Linear(h_.get(), T, hidden, w.gate_up, 2 * inter, gate_up_.get()));
    if (c.mlp_bias)
      RETURN_IF_ERROR(
          AddBias(gate_up_.get(), w.gate_up_bias.get(), T, 2 * inter, 2 * inter, stream_));
    RETURN_IF_ERROR(SiluMul(gate_up_.get(), T, inter, act_.get(), stream_));
    RETURN_IF_ERROR(Linear(act_.get(), T, inter, w.down, hidden, tmp_.get()));
    if (c.mlp_bias)
      RETURN_IF_ERROR(AddBias(tmp_.get(), w.down_bias.get(), T, hidden, hidden, stream_));
    RETURN_IF_ERROR(AddInPlace(x_.get(), tmp_.get(), static_cast<int64_t>(T) * hidden, stream_));
  }

  if (R > 0) {
    RETURN_IF_ERROR(
        EmbeddingGather(x_.get(), DType::kF32, logit_rows_.get(), R, hidden, h_.get(), stream_));
    RETURN_IF_ERROR(RmsNorm(h_.get(), hidden, final_norm_.get(), c.rms_norm_eps, R, hidden,
                            h_.get(), hidden, stream_));
    RETURN_IF_ERROR(Linear(h_.get(), R, hidden, lm_head_, c.vocab_size, logits_.get()));
  }
  return absl::OkStatus();
}

std::vector<uintptr_t> CudaModel::GraphInputs(const kvcache::KvPool& pool) const {
  std::vector<uintptr_t> in;
  for (const DeviceArray<float>* a : {&x_, &h_, &tmp_, &qkv_, &attn_, &gate_up_, &act_, &logits_,
                                      &partials_, &rope_cos_, &rope_sin_})
    in.push_back(reinterpret_cast<uintptr_t>(a->get()));
  for (const DeviceArray<int32_t>* a :
       {&tokens_, &token_seq_, &token_pos_, &table_offset_, &tables_, &logit_rows_})
    in.push_back(reinterpret_cast<uintptr_t>(a->get()));
  in.push_back(reinterpret_cast<uintptr_t>(narrow_.get()));
  in.push_back(reinterpret_cast<uintptr_t>(pool.base()));
  in.push_back(static_cast<uintptr_t>(pool.layout().num_blocks));
  in.push_back(static_cast<uintptr_t>(pool.layout().block_size));
  in.push_back(static_cast<uintptr_t>(pool.layout().dtype));
  return in;
}

// Decode steps of a captured batch size replay a CUDA graph (captured on the second step of
// that shape: the first, eager, grows every scratch buffer to its size); anything else, and a
// graph whose buffers have moved since, runs eagerly.
absl::Status CudaModel::RunModel(const PackedBatch& batch, int T, int R, const SplitK& split,
                                 kvcache::KvPool& pool) {
  bool decode = R == T;
  for (const BatchSequence& b : batch.sequences) decode &= b.num_tokens == 1 && b.want_logits;
  const bool graphable = decode && std::find(graph_batch_sizes_.begin(), graph_batch_sizes_.end(),
                                             T) != graph_batch_sizes_.end();
  if (!graphable) return EnqueueModel(T, R, split, pool, nullptr);
  const std::pair<int, int> key{T, split.partitions};
  CapturedStep& step = graphs_[key];
  const std::vector<uintptr_t> inputs = GraphInputs(pool);
  if (step.exec != nullptr && step.inputs != inputs) {
    cudaGraphExecDestroy(step.exec);
    step.exec = nullptr;
    step.eager_runs = 0;
  }
  if (step.exec == nullptr) {
    if (step.eager_runs++ == 0) return EnqueueModel(T, R, split, pool, nullptr);
    cudaGraph_t graph = nullptr;
    RETURN_IF_ERROR(CudaOk(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                           "cudaStreamBeginCapture"));
    const absl::Status enqueued = EnqueueModel(T, R, split, pool, nullptr);
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    RETURN_IF_ERROR(enqueued);
    RETURN_IF_ERROR(CudaOk(ended, "cudaStreamEndCapture"));
    const cudaError_t made = cudaGraphInstantiate(&step.exec, graph, 0);
    cudaGraphDestroy(graph);
    RETURN_IF_ERROR(CudaOk(made, "cudaGraphInstantiate"));
    step.inputs = inputs;
    ++graphs_captured_;
  }
  ++graph_replays_;
  return CudaOk(cudaGraphLaunch(step.exec, stream_), "cudaGraphLaunch");
}

absl::Status CudaModel::Forward(const PackedBatch& batch, kvcache::KvPool& pool,
                                const ForwardOptions& options, Logits* logits) {
  const ModelConfig& c = config_;
  const KvLayout& layout = pool.layout();
  RETURN_IF_ERROR(CheckForwardInputs(batch, pool));
  const int T = batch.num_tokens();
  logits->vocab = c.vocab_size;
  if (T == 0) {
    logits->rows = 0;
    logits->data.clear();
    return absl::OkStatus();
  }
  const int hidden = c.hidden_size;
  const int q_dim = c.q_dim();
  const int qkv_dim = q_dim + 2 * c.kv_dim();
  const int inter = c.intermediate_size;
  const size_t rows = T;
  for (auto [buffer, width] :
       {std::pair{&x_, hidden}, std::pair{&h_, hidden}, std::pair{&tmp_, hidden},
        std::pair{&qkv_, qkv_dim}, std::pair{&attn_, q_dim}, std::pair{&gate_up_, 2 * inter},
        std::pair{&act_, inter}}) {
    RETURN_IF_ERROR(buffer->Reserve(rows * width));
  }
  logits->sampled.clear();
  const int want_rows = batch.num_logit_rows();
  if (!options.sample_rows.empty() && static_cast<int>(options.sample_rows.size()) != want_rows) {
    return absl::InvalidArgumentError(absl::StrCat("sample_rows: ", options.sample_rows.size(),
                                                   " entries for ", want_rows, " logits rows"));
  }
  RETURN_IF_ERROR(Stage(batch, layout, options.sample_rows));
  int max_positions = 0;
  for (const BatchSequence& b : batch.sequences)
    max_positions = std::max(max_positions, b.start_position + b.num_tokens);
  const SplitK split = PlanSplitK(T, c.num_heads, max_positions, split_k_partition_, sm_count_);
  if (split.partitions > 1) {
    RETURN_IF_ERROR(
        partials_.Reserve(AttentionPartialFloats(T, c.num_heads, split.partitions, c.head_dim)));
  }
  const int R = logit_row_count_;
  if (R > 0) RETURN_IF_ERROR(logits_.Reserve(static_cast<size_t>(R) * c.vocab_size));
  if (options.layer_hook) {
    RETURN_IF_ERROR(EnqueueModel(T, R, split, pool, &options.layer_hook));
  } else {
    RETURN_IF_ERROR(RunModel(batch, T, R, split, pool));
  }
  // The logits rows: sampled on the device, or copied out.
  logits->rows = R;
  if (options.sample_rows.empty()) {
    logits->data.resize(static_cast<size_t>(R) * c.vocab_size);
  } else {
    logits->data.clear();
  }
  if (R > 0) {
    if (!options.sample_rows.empty()) {
      // Sampled here: only R token ids cross to the host, not R x vocab logits.
      RETURN_IF_ERROR(sampled_.Reserve(R));
      RETURN_IF_ERROR(SampleRowsOnDevice(logits_.get(), R, c.vocab_size, sample_params_.get(),
                                         logits_.get(), sampled_.get(), stream_));
      logits->sampled.resize(R);
      RETURN_IF_ERROR(CudaOk(cudaMemcpyAsync(logits->sampled.data(), sampled_.get(),
                                             R * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
                             "sampled"));
    } else {
      RETURN_IF_ERROR(CudaOk(
          cudaMemcpyAsync(logits->data.data(), logits_.get(), logits->data.size() * sizeof(float),
                          cudaMemcpyDeviceToHost, stream_),
          "logits"));
    }
  }
  return CudaOk(cudaStreamSynchronize(stream_), "forward");
}

}  // namespace

CudaGraphStats GetCudaGraphStats(const Model& model) {
  const auto* cuda = dynamic_cast<const CudaModel*>(&model);
  return cuda == nullptr ? CudaGraphStats{} : cuda->graph_stats();
}

std::optional<DType> GetCudaWeightDtype(const Model& model) {
  const auto* cuda = dynamic_cast<const CudaModel*>(&model);
  if (cuda == nullptr) return std::nullopt;
  return cuda->weight_dtype();
}

absl::StatusOr<std::unique_ptr<Model>> LoadCudaModel(Checkpoint& checkpoint,
                                                     const CudaModelOptions& options) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError("backend cuda: no usable GPU; use --backend=cpu");
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("backend cuda: device ", options.device,
                                                   " does not exist (", count, " found)"));
  }
  return CudaModel::Load(checkpoint, options);
}

}  // namespace pdserve::engine::cuda
