// The CUDA model against the CPU engine on the same checkpoints (the test models: Llama,
// Qwen2 biases, Qwen3 q/k norms, tied bf16 with Llama 3 rope scaling): logits of a prompt
// (relative error <= 1e-3 in f32), greedy tokens identical for 32 steps, a packed batch of
// prefill chunks and decode tokens equal to each sequence run alone, a KV pool in bf16, and
// the independent NumPy reference forward. Clear errors: a model too large for the device.
// Needs a GPU: without one every test is skipped (CTest label gpu), never passed.
#include "engine/cuda/cuda_model.h"

#include <algorithm>
#include <numeric>

#include "engine/cuda/device.h"
#include "engine/model_loader.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace pdserve::engine {
namespace {

using kvcache::KvPool;
using text::SamplingConfig;

using pdserve::testing::MaxRelativeError;
using pdserve::testing::TestModelDir;

std::vector<int32_t> Prompt(int n, int vocab, int seed) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 7919 + seed * 104729 + 13) % vocab;
  return p;
}

std::vector<int32_t> Blocks(int first, int count) {
  std::vector<int32_t> b(count);
  std::iota(b.begin(), b.end(), first);
  return b;
}

double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> ref(b.begin(), b.end());
  return MaxRelativeError(a, ref);
}

class CudaModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const cuda::DeviceInfo info = cuda::ProbeDevices();
    if (info.count == 0) GTEST_SKIP() << "no GPU: " << info.reason;
    // f32 on both: the checking mode (a bf16 checkpoint is widened on both).
    auto gpu = LoadModel(TestModelDir(GetParam()),
                         EngineOptions{.backend = "cuda", .weight_dtype = "f32"});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    auto cpu =
        LoadModel(TestModelDir(GetParam()), EngineOptions{.num_threads = 2, .weight_dtype = "f32"});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    gpu_ = std::move(gpu->model);
    cpu_ = std::move(cpu->model);
    ASSERT_EQ(gpu_->backend_name(), "cuda");
    ASSERT_TRUE(gpu_->kv_pool_on_device());
  }
  // The variant on the GPU with `options` (f32 weights unless they say otherwise).
  static std::unique_ptr<Model> LoadCuda(const cuda::CudaModelOptions& options) {
    auto checkpoint = Checkpoint::Open(TestModelDir(GetParam()));
    EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
    if (!checkpoint.ok()) return nullptr;
    auto model = cuda::LoadCudaModel(**checkpoint, options);
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? *std::move(model) : nullptr;
  }
  std::unique_ptr<KvPool> Pool(const Model& m, int blocks, DType dtype = DType::kF32) {
    auto pool = m.AllocateKvPool(m.MakeKvLayout(blocks, 16, dtype));
    EXPECT_TRUE(pool.ok()) << pool.status();
    return pool.ok() ? *std::move(pool) : nullptr;
  }
  // Prefills `prompt` in chunks of `chunk`, then decodes `steps` greedy tokens; returns the
  // tokens and the first logits.
  static std::pair<std::vector<int32_t>, std::vector<float>> Generate(Model& m, KvPool& pool,
                                                                      std::vector<int32_t> tokens,
                                                                      int chunk, int steps) {
    const std::vector<int32_t> blocks = Blocks(0, pool.layout().num_blocks);
    Logits logits;
    std::vector<float> first;
    const int prompt = static_cast<int>(tokens.size());
    for (int pos = 0; pos < prompt; pos += chunk) {
      const int n = std::min(chunk, prompt - pos);
      PackedBatch batch;
      batch.Add(absl::MakeConstSpan(tokens).subspan(pos, n), pos, blocks, pos + n == prompt);
      EXPECT_TRUE(m.Forward(batch, pool, {}, &logits).ok());
    }
    first.assign(logits.data.begin(), logits.data.end());
    for (int s = 0; s < steps; ++s) {
      const auto row = logits.Row(0);
      tokens.push_back(
          static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
      PackedBatch batch;
      batch.Add(absl::MakeConstSpan(tokens).subspan(tokens.size() - 1, 1), tokens.size() - 1,
                blocks, true);
      EXPECT_TRUE(m.Forward(batch, pool, {}, &logits).ok());
    }
    return {std::vector<int32_t>(tokens.begin() + prompt, tokens.end()), first};
  }

  std::unique_ptr<Model> gpu_, cpu_;
};

TEST_P(CudaModelTest, LogitsAndGreedyTokensMatchTheCpuEngine) {
  const int vocab = gpu_->config().vocab_size;
  auto gpu_pool = Pool(*gpu_, 64);
  auto cpu_pool = Pool(*cpu_, 64);
  ASSERT_TRUE(gpu_pool && cpu_pool);
  const auto [gpu_tokens, gpu_logits] = Generate(*gpu_, *gpu_pool, Prompt(300, vocab, 1), 128, 32);
  const auto [cpu_tokens, cpu_logits] = Generate(*cpu_, *cpu_pool, Prompt(300, vocab, 1), 128, 32);
  EXPECT_LE(RelativeError(gpu_logits, cpu_logits), 1e-3);
  EXPECT_EQ(gpu_tokens, cpu_tokens);
}

TEST_P(CudaModelTest, APackedBatchEqualsEachSequenceAlone) {
  const int vocab = gpu_->config().vocab_size;
  auto pool = Pool(*gpu_, 96);
  ASSERT_TRUE(pool);
  // Sequence A: 200 tokens cached; sequence B: 40 cached. The packed step runs A's decode
  // token, a 100-token chunk of C (fresh) and B's next 20-token chunk together.
  const std::vector<int32_t> a = Prompt(201, vocab, 2), b = Prompt(60, vocab, 3),
                             c = Prompt(100, vocab, 4);
  const std::vector<int32_t> blocks_a = Blocks(0, 32), blocks_b = Blocks(32, 32),
                             blocks_c = Blocks(64, 32);
  Logits logits;
  PackedBatch warm;
  warm.Add(absl::MakeConstSpan(a).subspan(0, 200), 0, blocks_a, false);
  warm.Add(absl::MakeConstSpan(b).subspan(0, 40), 0, blocks_b, false);
  ASSERT_TRUE(gpu_->Forward(warm, *pool, {}, &logits).ok());
  PackedBatch mixed;
  mixed.Add(absl::MakeConstSpan(a).subspan(200, 1), 200, blocks_a, true);
  mixed.Add(absl::MakeConstSpan(c), 0, blocks_c, true);
  mixed.Add(absl::MakeConstSpan(b).subspan(40, 20), 40, blocks_b, true);
  ASSERT_TRUE(gpu_->Forward(mixed, *pool, {}, &logits).ok());
  ASSERT_EQ(logits.rows, 3);
  // Each alone, on a fresh pool, in one prefill.
  for (auto [tokens, row] : {std::pair{&a, 0}, std::pair{&c, 1}, std::pair{&b, 2}}) {
    auto alone_pool = Pool(*gpu_, 32);
    Logits alone;
    PackedBatch batch;
    batch.Add(*tokens, 0, Blocks(0, 32), true);
    ASSERT_TRUE(gpu_->Forward(batch, *alone_pool, {}, &alone).ok());
    const auto got = logits.Row(row);
    EXPECT_LE(RelativeError(std::vector<float>(got.begin(), got.end()), alone.data), 1e-4) << row;
  }
}

TEST_P(CudaModelTest, ABf16KvPoolStaysCloseToF32) {
  const int vocab = gpu_->config().vocab_size;
  auto f32 = Pool(*gpu_, 32);
  auto bf16 = Pool(*gpu_, 32, DType::kBF16);
  ASSERT_TRUE(f32 && bf16);
  const auto [t32, l32] = Generate(*gpu_, *f32, Prompt(120, vocab, 5), 64, 0);
  const auto [t16, l16] = Generate(*gpu_, *bf16, Prompt(120, vocab, 5), 64, 0);
  // bf16 keeps 8 bits of mantissa: logits within a few percent of their range.
  EXPECT_LE(RelativeError(l16, l32), 3e-2);
}

TEST_P(CudaModelTest, TheLayerHookFiresOncePerLayerInOrder) {
  auto pool = Pool(*gpu_, 16);
  ASSERT_TRUE(pool);
  std::vector<int> fired;
  ForwardOptions options{.layer_hook = [&](int layer) {
    fired.push_back(layer);
    return layer < 1;  // Cancel after layer 1.
  }};
  PackedBatch batch;
  batch.Add(Prompt(20, gpu_->config().vocab_size, 6), 0, Blocks(0, 16), true);
  Logits logits;
  EXPECT_EQ(gpu_->Forward(batch, *pool, options, &logits).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(fired, (std::vector<int>{0, 1}));
}

// bf16 weights on both engines: the GPU also rounds the activations to bf16 before each GEMM
// (tensor cores), the CPU engine keeps them in f32; the documented tolerance is 5 % of the
// logits' range, with the first greedy token equal.
TEST_P(CudaModelTest, Bf16WeightsStayWithinTheDocumentedTolerance) {
  auto gpu =
      LoadModel(TestModelDir(GetParam()), EngineOptions{.backend = "cuda", .weight_dtype = "bf16"});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu =
      LoadModel(TestModelDir(GetParam()), EngineOptions{.num_threads = 2, .weight_dtype = "bf16"});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_LT(gpu->model->weight_bytes(), gpu_->weight_bytes() * 6 / 10);
  EXPECT_EQ(cuda::GetCudaWeightDtype(*gpu->model), DType::kBF16);
  EXPECT_EQ(cuda::GetCudaWeightDtype(*gpu_), DType::kF32);
  EXPECT_FALSE(cuda::GetCudaWeightDtype(*cpu_).has_value());
  const int vocab = gpu_->config().vocab_size;
  auto gpu_pool = Pool(*gpu->model, 32);
  auto cpu_pool = Pool(*cpu->model, 32);
  ASSERT_TRUE(gpu_pool && cpu_pool);
  const auto [gpu_tokens, gpu_logits] =
      Generate(*gpu->model, *gpu_pool, Prompt(100, vocab, 8), 64, 1);
  const auto [cpu_tokens, cpu_logits] =
      Generate(*cpu->model, *cpu_pool, Prompt(100, vocab, 8), 64, 1);
  EXPECT_LE(RelativeError(gpu_logits, cpu_logits), 5e-2);
  EXPECT_EQ(gpu_tokens, cpu_tokens);
}

// Sampling on the device picks the CPU engine's tokens (same rule, same random stream) from the
// GPU's logits, and returns no logits rows. Draws that land within rounding of a boundary may
// differ (the two engines' logits agree to 1e-3): at most 1 in 50.
TEST_P(CudaModelTest, DeviceSamplingPicksTheHostSamplersTokens) {
  const int vocab = gpu_->config().vocab_size;
  auto pool = Pool(*gpu_, 64);
  ASSERT_TRUE(pool);
  std::vector<SamplingConfig> configs(6);
  configs[0].temperature = 0;
  configs[1].temperature = 0.8f;
  configs[2].temperature = 1.0f;
  configs[2].top_k = 20;
  configs[3].temperature = 1.2f;
  configs[3].top_p = 0.7f;
  configs[4].temperature = 0.5f;
  configs[4].top_k = 50;
  configs[4].top_p = 0.9f;
  configs[5].top_k = 1;
  int draws = 0, same = 0;
  for (int trial = 0; trial < 8; ++trial) {
    PackedBatch batch;
    std::vector<std::vector<int32_t>> prompts;
    std::vector<RowSampling> rows;
    for (int s = 0; s < 6; ++s) prompts.push_back(Prompt(20 + 7 * s, vocab, 100 + trial * 6 + s));
    for (int s = 0; s < 6; ++s) {
      configs[s].seed = 1000 + trial;
      batch.Add(prompts[s], 0, Blocks(s * 8, 8), true);
      rows.push_back({&configs[s], prompts[s].size()});
    }
    Logits device, host;
    SamplerScratch scratch;
    ASSERT_TRUE(ForwardAndSample(*gpu_, batch, *pool, {}, rows, &device, &scratch).ok());
    EXPECT_TRUE(device.data.empty());
    ASSERT_EQ(device.sampled.size(), 6u);
    ASSERT_TRUE(gpu_->Forward(batch, *pool, {}, &host).ok());  // The same logits, on the host.
    for (int s = 0; s < 6; ++s) {
      const int32_t want = SampleToken(host.Row(s), configs[s], rows[s].position, &scratch);
      ++draws;
      same += device.sampled[s] == want;
      if (configs[s].greedy()) {
        EXPECT_EQ(device.sampled[s], want) << trial << " " << s;
      }
    }
  }
  EXPECT_GE(same * 50, draws * 49) << same << " of " << draws;
}

// Split-K attention (a decode token over a long context spread over partitions, merged
// after) equals the one-block-per-head kernel.
TEST_P(CudaModelTest, SplitKAttentionEqualsTheUnsplitKernel) {
  std::unique_ptr<Model> split = LoadCuda({.split_k_partition = 64});
  std::unique_ptr<Model> unsplit = LoadCuda({.split_k_partition = 0});
  ASSERT_TRUE(split && unsplit);
  Model& plain_model = *unsplit;
  const int vocab = gpu_->config().vocab_size;
  auto plain_pool = Pool(plain_model, 64);
  auto split_pool = Pool(*split, 64);
  ASSERT_TRUE(plain_pool && split_pool);
  // 600 cached positions, then 4 decode steps: each splits into ~10 partitions of 64.
  const auto [plain_tokens, plain_first] =
      Generate(plain_model, *plain_pool, Prompt(600, vocab, 9), 300, 4);
  const auto [split_tokens, split_first] =
      Generate(*split, *split_pool, Prompt(600, vocab, 9), 300, 4);
  EXPECT_EQ(split_tokens, plain_tokens);
  Logits plain, parted;
  PackedBatch step;
  const std::vector<int32_t> next = {plain_tokens.back()};
  step.Add(next, 604, Blocks(0, 64), true);
  ASSERT_TRUE(plain_model.Forward(step, *plain_pool, {}, &plain).ok());
  ASSERT_TRUE(split->Forward(step, *split_pool, {}, &parted).ok());
  EXPECT_LE(RelativeError(parted.data, plain.data), 1e-5);
}

// Decode steps of a captured batch size replay a CUDA graph (from the second step on) and give
// the eager steps' logits bit for bit; other shapes run eagerly.
TEST_P(CudaModelTest, GraphReplayEqualsEagerDecodeSteps) {
  std::unique_ptr<Model> graphed = LoadCuda({.graph_batch_sizes = {3}});
  ASSERT_TRUE(graphed);
  const int vocab = gpu_->config().vocab_size;
  auto eager_pool = Pool(*gpu_, 48);
  auto graph_pool = Pool(*graphed, 48);
  ASSERT_TRUE(eager_pool && graph_pool);
  std::vector<std::vector<int32_t>> seqs = {Prompt(40, vocab, 31), Prompt(17, vocab, 32),
                                            Prompt(90, vocab, 33)};
  for (Model* m : {gpu_.get(), graphed.get()}) {
    PackedBatch prefill;
    for (int s = 0; s < 3; ++s) prefill.Add(seqs[s], 0, Blocks(s * 16, 16), true);
    Logits ignored;
    ASSERT_TRUE(
        m->Forward(prefill, m == gpu_.get() ? *eager_pool : *graph_pool, {}, &ignored).ok());
  }
  for (int step = 0; step < 6; ++step) {
    PackedBatch batch;
    std::vector<int32_t> next(3);
    for (int s = 0; s < 3; ++s) {
      next[s] = (step * 7 + s * 13) % vocab;
      batch.Add(absl::MakeConstSpan(&next[s], 1), seqs[s].size() + step, Blocks(s * 16, 16), true);
    }
    Logits eager, replayed;
    ASSERT_TRUE(gpu_->Forward(batch, *eager_pool, {}, &eager).ok());
    ASSERT_TRUE(graphed->Forward(batch, *graph_pool, {}, &replayed).ok());
    EXPECT_EQ(replayed.data, eager.data) << "step " << step;
  }
  const cuda::CudaGraphStats stats = cuda::GetCudaGraphStats(*graphed);
  EXPECT_EQ(stats.captured, 1);
  EXPECT_EQ(stats.replays, 5);  // The first step of the shape runs eagerly.
  EXPECT_EQ(cuda::GetCudaGraphStats(*cpu_).replays, 0);
}

INSTANTIATE_TEST_SUITE_P(Variants, CudaModelTest,
                         ::testing::Values("tiny", "tiny-qwen2", "tiny-qwen3", "tiny-tied-bf16"));

// Against the independent NumPy forward (float64), where numpy is installed.
TEST(CudaModelReferenceTest, MatchesTheNumpyReference) {
  if (cuda::ProbeDevices().count == 0) GTEST_SKIP() << "no GPU";
  const std::string dir = TestModelDir("tiny");
  auto gpu = LoadModel(dir, EngineOptions{.backend = "cuda", .weight_dtype = "f32"});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const std::vector<int32_t> prompt = Prompt(64, gpu->model->config().vocab_size, 7);
  auto ref = pdserve::testing::ReferenceLastLogits(dir, {prompt});
  if (!ref.ok()) GTEST_SKIP() << "no reference: " << ref.status();
  auto pool = gpu->model->AllocateKvPool(gpu->model->MakeKvLayout(8, 16, DType::kF32));
  ASSERT_TRUE(pool.ok());
  PackedBatch batch;
  batch.Add(prompt, 0, Blocks(0, 8), true);
  Logits logits;
  ASSERT_TRUE(gpu->model->Forward(batch, **pool, {}, &logits).ok());
  EXPECT_LE(MaxRelativeError(logits.data, (*ref)[0]), 1e-3);
}

// Against Hugging Face transformers (LlamaForCausalLM / Qwen2 / Qwen3 on the same safetensors,
// float32), where torch and transformers are installed: an independent implementation.
TEST(CudaModelReferenceTest, MatchesHuggingFaceTransformers) {
  if (cuda::ProbeDevices().count == 0) GTEST_SKIP() << "no GPU";
  for (const std::string variant : {"tiny", "tiny-qwen2", "tiny-qwen3", "tiny-tied-bf16"}) {
    const std::string dir = TestModelDir(variant);
    auto gpu = LoadModel(dir, EngineOptions{.backend = "cuda", .weight_dtype = "f32"});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const int vocab = gpu->model->config().vocab_size;
    const std::vector<std::vector<int32_t>> prompts = {Prompt(48, vocab, 41),
                                                       Prompt(130, vocab, 42)};
    auto ref = pdserve::testing::HuggingFaceLastLogits(dir, prompts);
    if (absl::IsUnavailable(ref.status())) GTEST_SKIP() << ref.status();
    ASSERT_TRUE(ref.ok()) << ref.status();
    auto pool = gpu->model->AllocateKvPool(gpu->model->MakeKvLayout(32, 16, DType::kF32));
    ASSERT_TRUE(pool.ok());
    PackedBatch batch;
    batch.Add(prompts[0], 0, Blocks(0, 16), true);
    batch.Add(prompts[1], 0, Blocks(16, 16), true);
    Logits logits;
    ASSERT_TRUE(gpu->model->Forward(batch, **pool, {}, &logits).ok());
    for (int r = 0; r < 2; ++r) {
      const auto row = logits.Row(r);
      EXPECT_LE(MaxRelativeError(std::vector<float>(row.begin(), row.end()), (*ref)[r]), 1e-3)
          << variant << " row " << r;
    }
  }
}

// The weights' device footprint is known before loading, and a device too small says so.
TEST(CudaModelMemoryTest, WeightBytesFollowTheConfig) {
  ModelConfig c;
  c.vocab_size = 1000;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  // Embedding + LM head + final norm; per layer: 2 norms, qkv (64+2*32 rows), o, gate_up, down.
  const size_t per_layer = 2 * 64 + 128 * 64 + 64 * 64 + 2 * 128 * 64 + 64 * 128;
  EXPECT_EQ(cuda::CudaWeightBytes(c), (2 * 1000 * 64 + 64 + 2 * per_layer) * sizeof(float));
  c.qkv_bias = true;
  EXPECT_EQ(cuda::CudaWeightBytes(c), (2 * 1000 * 64 + 64 + 2 * (per_layer + 128)) * sizeof(float));
  // Half weights: the matrices take two bytes an element, norms and biases stay f32.
  const size_t matrices = 2 * 1000 * 64 + 2 * (128 * 64 + 64 * 64 + 2 * 128 * 64 + 64 * 128);
  const size_t vectors = 64 + 2 * (2 * 64 + 128);
  EXPECT_EQ(cuda::CudaWeightBytes(c, DType::kBF16), matrices * 2 + vectors * sizeof(float));
  EXPECT_EQ(cuda::CudaWeightBytes(c, DType::kF16), cuda::CudaWeightBytes(c, DType::kBF16));
}

// The split-K plan: only small launches over long contexts split, at most 64 partitions.
TEST(CudaModelSplitKTest, SplitsOnlySmallLaunchesOverLongContexts) {
  EXPECT_EQ(cuda::PlanSplitK(1, 32, 4096, 0, 132).partitions, 1);     // Disabled.
  EXPECT_EQ(cuda::PlanSplitK(1, 32, 512, 512, 132).partitions, 1);    // Short context.
  EXPECT_EQ(cuda::PlanSplitK(64, 32, 4096, 512, 132).partitions, 1);  // The grid is full.
  const cuda::SplitK decode = cuda::PlanSplitK(1, 32, 4096, 512, 132);
  EXPECT_EQ(decode.partitions, 8);
  EXPECT_EQ(decode.partition, 512);
  const cuda::SplitK very_long = cuda::PlanSplitK(2, 32, 100000, 512, 132);
  EXPECT_EQ(very_long.partition, 1563);
  EXPECT_EQ(very_long.partitions, 64);
  EXPECT_LE(very_long.partitions, cuda::kMaxSplitKPartitions);
}

}  // namespace
}  // namespace pdserve::engine
