// The CPU forward pass against an independent float64 NumPy implementation of the same
// architecture: (a) a full prefill, (b) a chunked prefill over a cached prefix, (c) one
// packed batch mixing prefill chunks and decodes of different sequences. Every variant of
// the architecture we load (Llama, Qwen2 biases, Qwen3 q/k norm, tied bf16 weights with
// Llama-3 rope scaling, sharded f16) must agree to a max relative error below 1e-4; and so
// must a float32 checkpoint kept in bf16 or f16 (--weight_dtype), against the reference run on
// the same rounded weights (the engine widens them exactly and accumulates in float32).
// Parameters are "variant" or "variant:weight_dtype".
#include <numeric>
#include <random>

#include "engine/model_loader.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace pdserve::engine {
namespace {

using kvcache::KvPool;

using pdserve::testing::MaxRelativeError;
using pdserve::testing::ReferenceLastLogits;
using pdserve::testing::TestModelDir;

constexpr double kMaxRelativeError = 1e-4;

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out(n);
  for (auto& t : out) t = static_cast<int32_t>(rng() % vocab);
  return out;
}

std::vector<float> RowOf(const Logits& logits, int r) {
  auto row = logits.Row(r);
  return std::vector<float>(row.begin(), row.end());
}

class ForwardReferenceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string param = GetParam();
    const size_t colon = param.find(':');
    dir_ = TestModelDir(param.substr(0, colon));
    weight_dtype_ = colon == std::string::npos ? "" : param.substr(colon + 1);
    auto loaded = LoadModel(
        dir_, EngineOptions{.num_threads = 2,
                            .weight_dtype = weight_dtype_.empty() ? "auto" : weight_dtype_});
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    model_ = std::move(loaded->model);
    vocab_ = model_->config().vocab_size;
    auto pool = KvPool::Allocate(model_->MakeKvLayout(64, 16, DType::kF32));
    ASSERT_TRUE(pool.ok());
    pool_ = *std::move(pool);
  }
  std::vector<int32_t> Blocks(int first, int count) {
    std::vector<int32_t> b(count);
    std::iota(b.begin(), b.end(), first);
    return b;
  }

  std::string dir_;
  std::string weight_dtype_;  // Empty: as the checkpoint stores its weights.
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvPool> pool_;
  int vocab_ = 0;
};

TEST_P(ForwardReferenceTest, FullPrefillMatchesReference) {
  const auto prompt = RandomTokens(37, vocab_, 1);
  const auto blocks = Blocks(0, 3);
  PackedBatch batch;
  batch.Add(prompt, 0, blocks, true);
  Logits logits;
  ASSERT_TRUE(model_->Forward(batch, *pool_, {}, &logits).ok());
  auto ref = ReferenceLastLogits(dir_, {prompt}, weight_dtype_);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const double err = MaxRelativeError(RowOf(logits, 0), (*ref)[0]);
  EXPECT_LT(err, kMaxRelativeError);
  RecordProperty("max_relative_error", std::to_string(err));
}

TEST_P(ForwardReferenceTest, ChunkedPrefillOverCachedPrefixMatchesReference) {
  const auto prompt = RandomTokens(50, vocab_, 2);
  const auto blocks = Blocks(8, 4);
  PackedBatch batch;
  Logits logits;
  // The first 32 tokens are "cached" (computed in an earlier step, no logits), then the
  // rest arrives as chunks of 11 and 7.
  batch.Add(absl::MakeConstSpan(prompt).subspan(0, 32), 0, blocks, false);
  ASSERT_TRUE(model_->Forward(batch, *pool_, {}, &logits).ok());
  EXPECT_EQ(logits.rows, 0);
  batch.Clear();
  batch.Add(absl::MakeConstSpan(prompt).subspan(32, 11), 32, blocks, false);
  ASSERT_TRUE(model_->Forward(batch, *pool_, {}, &logits).ok());
  batch.Clear();
  batch.Add(absl::MakeConstSpan(prompt).subspan(43, 7), 43, blocks, true);
  ASSERT_TRUE(model_->Forward(batch, *pool_, {}, &logits).ok());
  auto ref = ReferenceLastLogits(dir_, {prompt}, weight_dtype_);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_LT(MaxRelativeError(RowOf(logits, 0), (*ref)[0]), kMaxRelativeError);
}

TEST_P(ForwardReferenceTest, PackedBatchOfChunksAndDecodesMatchesReference) {
  const auto a = RandomTokens(40, vocab_, 3);  // Prefilled in two chunks.
  const auto b = RandomTokens(20, vocab_, 4);  // Prefilled, then decodes.
  const auto c = RandomTokens(5, vocab_, 5);   // Prefilled, then decodes.
  const auto d = RandomTokens(7, vocab_, 6);   // Fresh prefill in the mixed step.
  const auto ba = Blocks(0, 3), bb = Blocks(3, 2), bc = Blocks(5, 1), bd = Blocks(6, 1);
  Logits logits;
  PackedBatch step1;
  step1.Add(absl::MakeConstSpan(a).subspan(0, 16), 0, ba, false);
  step1.Add(absl::MakeConstSpan(b).subspan(0, 19), 0, bb, true);
  step1.Add(absl::MakeConstSpan(c).subspan(0, 4), 0, bc, true);
  ASSERT_TRUE(model_->Forward(step1, *pool_, {}, &logits).ok());
  ASSERT_EQ(logits.rows, 2);
  // Mixed step: a's second chunk, one decode token each for b and c, and all of d.
  PackedBatch step2;
  step2.Add(absl::MakeConstSpan(a).subspan(16, 24), 16, ba, true);
  step2.Add(absl::MakeConstSpan(b).subspan(19, 1), 19, bb, true);
  step2.Add(absl::MakeConstSpan(c).subspan(4, 1), 4, bc, true);
  step2.Add(d, 0, bd, true);
  ASSERT_TRUE(model_->Forward(step2, *pool_, {}, &logits).ok());
  ASSERT_EQ(logits.rows, 4);
  auto ref = ReferenceLastLogits(dir_, {a, b, c, d}, weight_dtype_);
  ASSERT_TRUE(ref.ok()) << ref.status();
  for (int r = 0; r < 4; ++r) {
    EXPECT_LT(MaxRelativeError(RowOf(logits, r), (*ref)[r]), kMaxRelativeError) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, ForwardReferenceTest,
                         ::testing::Values("tiny", "tiny-qwen2", "tiny-qwen3", "tiny-tied-bf16",
                                           "tiny-f16-sharded", "tiny:bf16", "tiny:f16",
                                           "tiny-qwen3:bf16"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (ch == '-' || ch == ':') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace pdserve::engine
