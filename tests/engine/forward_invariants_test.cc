// Properties of the forward pass that hold bit for bit, because every kernel computes each
// row with a fixed order of operations: a chunked prefill equals a full one, a sequence
// decoded in a batch equals it decoded alone, block placement does not matter, and the
// thread count does not matter; with the weights kept in float32, bfloat16 or float16. Plus
// the layer hook and malformed batches.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "engine/model_loader.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace pdserve::engine {
namespace {

using kvcache::KvPool;
using text::SamplingConfig;

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out(n);
  for (auto& t : out) t = static_cast<int32_t>(rng() % vocab);
  return out;
}

// The parameter is the weight dtype (--weight_dtype).
class ForwardInvariantsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto loaded = LoadModel(pdserve::testing::TestModelDir("tiny"),
                            EngineOptions{.num_threads = 2, .weight_dtype = GetParam()});
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    model_ = std::move(loaded->model);
  }
  std::unique_ptr<KvPool> NewPool(int blocks, DType dtype = DType::kF32) {
    auto pool = KvPool::Allocate(model_->MakeKvLayout(blocks, 16, dtype));
    EXPECT_TRUE(pool.ok());
    return *std::move(pool);
  }
  // Prefills `prompt` in chunks of `chunk`; returns the last logits.
  std::vector<float> Prefill(KvPool& pool, const std::vector<int32_t>& prompt, int chunk,
                             const std::vector<int32_t>& blocks) {
    Logits logits;
    for (int pos = 0; pos < static_cast<int>(prompt.size()); pos += chunk) {
      const int n = std::min<int>(chunk, prompt.size() - pos);
      PackedBatch batch;
      batch.Add(absl::MakeConstSpan(prompt).subspan(pos, n), pos, blocks,
                pos + n == static_cast<int>(prompt.size()));
      EXPECT_TRUE(model_->Forward(batch, pool, {}, &logits).ok());
    }
    return std::vector<float>(logits.data.begin(), logits.data.end());
  }
  // Bytes of K and V for positions [0, n) of a sequence, in position order.
  static std::string KvBytes(const KvPool& pool, const std::vector<int32_t>& blocks, int n) {
    std::string out;
    const KvLayout& l = pool.layout();
    for (int layer = 0; layer < l.num_layers; ++layer) {
      for (int kv = 0; kv < 2; ++kv) {
        for (int p = 0; p < n; ++p) {
          const uint8_t* row = pool.Region(layer, kv, blocks[p / l.block_size]) +
                               (p % l.block_size) * l.token_bytes();
          out.append(reinterpret_cast<const char*>(row), l.token_bytes());
        }
      }
    }
    return out;
  }
  std::unique_ptr<Model> model_;
};

std::vector<int32_t> Range(int first, int count) {
  std::vector<int32_t> b(count);
  std::iota(b.begin(), b.end(), first);
  return b;
}

TEST_P(ForwardInvariantsTest, ChunkedPrefillIsBitIdenticalToFullPrefill) {
  const auto prompt = RandomTokens(100, model_->config().vocab_size, 7);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    auto full_pool = NewPool(8, dtype);
    const auto blocks = Range(0, 7);
    const auto full = Prefill(*full_pool, prompt, 100, blocks);
    const std::string full_kv = KvBytes(*full_pool, blocks, 100);
    for (int chunk : {1, 7, 16, 33}) {
      auto pool = NewPool(8, dtype);
      const auto chunked = Prefill(*pool, prompt, chunk, blocks);
      ASSERT_EQ(chunked.size(), full.size());
      EXPECT_EQ(0, std::memcmp(chunked.data(), full.data(), full.size() * sizeof(float)))
          << "chunk " << chunk << " dtype " << DTypeName(dtype);
      EXPECT_EQ(KvBytes(*pool, blocks, 100), full_kv) << "chunk " << chunk;
    }
  }
}

TEST_P(ForwardInvariantsTest, BatchedDecodeIsBitIdenticalToDecodeAlone) {
  const int vocab = model_->config().vocab_size;
  const std::vector<int> lengths = {3, 17, 40, 64, 9, 25};
  auto alone_pool = NewPool(64);
  auto batch_pool = NewPool(64);
  std::vector<std::vector<int32_t>> prompts, tables;
  for (size_t s = 0; s < lengths.size(); ++s) {
    prompts.push_back(RandomTokens(lengths[s], vocab, 100 + s));
    tables.push_back(Range(static_cast<int>(s) * 8, 8));
    Prefill(*alone_pool, prompts[s], 64, tables[s]);
    Prefill(*batch_pool, prompts[s], 64, tables[s]);
  }
  for (int step = 0; step < 5; ++step) {
    PackedBatch batch;
    std::vector<std::vector<int32_t>> next(lengths.size());
    for (size_t s = 0; s < lengths.size(); ++s) {
      next[s] = {static_cast<int32_t>((step * 31 + s * 7) % vocab)};
      batch.Add(next[s], lengths[s] + step, tables[s], true);
    }
    Logits batched;
    ASSERT_TRUE(model_->Forward(batch, *batch_pool, {}, &batched).ok());
    for (size_t s = 0; s < lengths.size(); ++s) {
      PackedBatch single;
      single.Add(next[s], lengths[s] + step, tables[s], true);
      Logits alone;
      ASSERT_TRUE(model_->Forward(single, *alone_pool, {}, &alone).ok());
      EXPECT_EQ(0, std::memcmp(alone.data.data(), batched.Row(s).data(),
                               alone.data.size() * sizeof(float)))
          << "sequence " << s << " step " << step;
    }
  }
}

TEST_P(ForwardInvariantsTest, PermutedBlockTablesGiveIdenticalOutputs) {
  const auto prompt = RandomTokens(70, model_->config().vocab_size, 9);
  auto pool_a = NewPool(32);
  auto pool_b = NewPool(32);
  const auto in_order = Range(0, 5);
  std::vector<int32_t> scattered = {29, 3, 17, 8, 22};
  const auto a = Prefill(*pool_a, prompt, 30, in_order);
  const auto b = Prefill(*pool_b, prompt, 30, scattered);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  EXPECT_EQ(KvBytes(*pool_a, in_order, 70), KvBytes(*pool_b, scattered, 70));
}

TEST_P(ForwardInvariantsTest, ThreadCountDoesNotChangeResults) {
  auto single = LoadModel(pdserve::testing::TestModelDir("tiny"),
                          EngineOptions{.num_threads = 1, .weight_dtype = GetParam()});
  ASSERT_TRUE(single.ok());
  const auto prompt = RandomTokens(45, model_->config().vocab_size, 11);
  auto pool_a = NewPool(8);
  auto pool_b = NewPool(8);
  const auto blocks = Range(0, 3);
  const auto two = Prefill(*pool_a, prompt, 45, blocks);
  PackedBatch batch;
  batch.Add(prompt, 0, blocks, true);
  Logits one;
  ASSERT_TRUE(single->model->Forward(batch, *pool_b, {}, &one).ok());
  EXPECT_EQ(0, std::memcmp(two.data(), one.data.data(), two.size() * sizeof(float)));
}

TEST_P(ForwardInvariantsTest, LayerHookRunsPerLayerAfterKvIsWrittenAndCanCancel) {
  const auto prompt = RandomTokens(20, model_->config().vocab_size, 12);
  const auto blocks = Range(0, 2);
  auto pool = NewPool(4);
  std::vector<int> layers;
  std::vector<bool> kv_written;
  ForwardOptions options;
  options.layer_hook = [&](int layer) {
    layers.push_back(layer);
    // The layer's K for the last token must already be in the pool.
    const KvLayout& l = pool->layout();
    const float* k = reinterpret_cast<const float*>(pool->Region(layer, 0, blocks[19 / 16]) +
                                                    (19 % 16) * l.token_bytes());
    kv_written.push_back(k[0] != 0.0f || k[1] != 0.0f);
    return true;
  };
  PackedBatch batch;
  batch.Add(prompt, 0, blocks, true);
  Logits logits;
  ASSERT_TRUE(model_->Forward(batch, *pool, options, &logits).ok());
  std::vector<int> expected(model_->config().num_layers);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(layers, expected);
  EXPECT_TRUE(std::all_of(kv_written.begin(), kv_written.end(), [](bool b) { return b; }));

  options.layer_hook = [](int layer) { return layer < 1; };
  const absl::Status cancelled = model_->Forward(batch, *pool, options, &logits);
  EXPECT_EQ(cancelled.code(), absl::StatusCode::kCancelled);
}

TEST_P(ForwardInvariantsTest, MalformedBatchesAreRejectedWithClearErrors) {
  auto pool = NewPool(4);
  const auto blocks = Range(0, 2);
  Logits logits;
  auto expect_error = [&](const PackedBatch& batch, absl::string_view needle) {
    const absl::Status s = model_->Forward(batch, *pool, {}, &logits);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(needle), absl::string_view::npos) << s;
  };
  PackedBatch bad_token;
  bad_token.Add(std::vector<int32_t>{1, model_->config().vocab_size}, 0, blocks, true);
  expect_error(bad_token, "token id");
  PackedBatch negative_token;
  negative_token.Add(std::vector<int32_t>{-1}, 0, blocks, true);
  expect_error(negative_token, "token id");
  PackedBatch short_table;
  short_table.Add(RandomTokens(20, 100, 1), 0, absl::MakeConstSpan(blocks).subspan(0, 1), true);
  expect_error(short_table, "needs 2 blocks");
  const std::vector<int32_t> out_of_range = {0, 99};
  PackedBatch bad_block;
  bad_block.Add(RandomTokens(20, 100, 1), 0, out_of_range, true);
  expect_error(bad_block, "block id 99");
  std::vector<int32_t> many_blocks(1000, 0);
  PackedBatch too_long;
  too_long.Add(std::vector<int32_t>{1}, model_->config().max_position_embeddings, many_blocks,
               true);
  expect_error(too_long, "beyond the model");
  // A pool of another geometry is refused before anything is written.
  KvLayout other = pool->layout();
  other.head_dim *= 2;
  auto wrong = KvPool::Allocate(other);
  ASSERT_TRUE(wrong.ok());
  PackedBatch fine;
  fine.Add(std::vector<int32_t>{1, 2}, 0, blocks, true);
  EXPECT_EQ(model_->Forward(fine, **wrong, {}, &logits).code(),
            absl::StatusCode::kFailedPrecondition);
}

// ForwardAndSample samples each logits row in batch order with its own config and position,
// exactly as SampleToken on the logits (the CPU backend samples on the host), and rejects a
// row count that does not match the batch.
TEST_P(ForwardInvariantsTest, ForwardAndSampleSamplesEachRowInBatchOrder) {
  const int vocab = model_->config().vocab_size;
  auto pool = NewPool(24);
  const std::vector<int32_t> a = RandomTokens(30, vocab, 21), b = RandomTokens(12, vocab, 22),
                             c = RandomTokens(9, vocab, 23);
  std::vector<int32_t> blocks(24);
  std::iota(blocks.begin(), blocks.end(), 0);
  PackedBatch batch;
  batch.Add(a, 0, absl::MakeConstSpan(blocks).subspan(0, 8), true);
  batch.Add(b, 0, absl::MakeConstSpan(blocks).subspan(8, 8), false);
  batch.Add(c, 0, absl::MakeConstSpan(blocks).subspan(16, 8), true);
  SamplingConfig greedy, hot;
  greedy.temperature = 0;
  hot.temperature = 1.3f;
  hot.top_p = 0.9f;
  hot.seed = 5;
  const RowSampling rows[] = {{&greedy, 30}, {&hot, 9}};
  Logits logits;
  SamplerScratch scratch;
  ASSERT_TRUE(ForwardAndSample(*model_, batch, *pool, {}, rows, &logits, &scratch).ok());
  ASSERT_EQ(logits.sampled.size(), 2u);
  EXPECT_EQ(logits.sampled[0], SampleToken(logits.Row(0), greedy, 30, &scratch));
  EXPECT_EQ(logits.sampled[1], SampleToken(logits.Row(1), hot, 9, &scratch));
  const auto status =
      ForwardAndSample(*model_, batch, *pool, {}, absl::MakeConstSpan(rows, 1), &logits, &scratch);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("sample_rows: 1 entries for 2 logits rows"), std::string::npos)
      << status;
}

INSTANTIATE_TEST_SUITE_P(WeightDtypes, ForwardInvariantsTest,
                         ::testing::Values("f32", "bf16", "f16"));

}  // namespace
}  // namespace pdserve::engine
