// The emulated backend: a forward step takes the profile's modelled time on the clock it is
// given (decode, prefill and mixed batches; layer hooks at their fraction of the step), its KV
// carries the token prefix so that chunked, batched, cached and corrupted KV behave as a real
// model's would, its tokens never end a sequence by themselves, and bad options name the flag.
#include "engine/emulated/emulated_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <vector>

#include "common/perf_profile.h"
#include "engine/model_loader.h"
#include "gtest/gtest.h"
#include "kvcache/kv_pool.h"
#include "tests/testing/jumping_clock.h"
#include "tests/testing/test_models.h"

namespace pdserve::engine {
namespace {

using kvcache::KvPool;
using text::SamplingConfig;

using pdserve::testing::JumpingClock;

PerfProfile TestProfile() {
  PerfProfile p;
  p.timing.step_intercept_ms = 5;
  p.timing.step_per_decode_ms = 0.25;
  p.timing.step_per_prefill_token_ms = 0.02;
  p.timing.step_per_attention_ms = 4e-5;
  p.timing.step_per_prefill_attention_ms = 5e-7;
  p.timing.prefill_overhead_ms = 0.3;
  p.timing.prefill_per_token_ms = 0.016;
  p.timing.prefill_per_token_squared_ms = 3e-7;
  p.has_shape = true;
  p.shape.kv_layout.num_layers = 8;
  p.shape.kv_layout.num_kv_heads = 8;
  p.shape.kv_layout.head_dim = 128;
  p.shape.kv_layout.block_size = 16;
  p.shape.kv_layout.num_blocks = 4096;
  p.shape.kv_layout.dtype = DType::kBF16;
  p.shape.prefill_kv_blocks = 1024;
  return p;
}

ModelConfig BaseConfig() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = 1000;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 4096;
  c.eos_token_ids = {2};
  return c;
}

struct Emulated {
  JumpingClock clock;
  std::unique_ptr<EmulatedModel> model;
  std::unique_ptr<KvPool> pool;
  explicit Emulated(const std::string& timing = "decode", int output_vocab = 0) {
    EmulatedModelOptions o;
    o.profile = TestProfile();
    o.timing = timing;
    o.output_vocab = output_vocab;
    o.clock = &clock;
    auto m = EmulatedModel::Create(BaseConfig(), o);
    EXPECT_TRUE(m.ok()) << m.status();
    model = *std::move(m);
    pool = *KvPool::Allocate(model->MakeKvLayout(256, 16, DType::kF32));
  }
  // Runs a batch and returns how long it took on the clock.
  double ForwardMs(const PackedBatch& batch, std::vector<int32_t>* sampled = nullptr) {
    const absl::Time start = clock.Now();
    Logits logits;
    EXPECT_TRUE(model->Forward(batch, *pool, {}, &logits).ok());
    if (sampled != nullptr) {
      sampled->clear();
      for (int r = 0; r < logits.rows; ++r) {
        const auto row = logits.Row(r);
        sampled->push_back(
            static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
      }
    }
    return absl::ToDoubleMilliseconds(clock.Now() - start);
  }
};

std::vector<int32_t> Blocks(int first, int count) {
  std::vector<int32_t> b(count);
  std::iota(b.begin(), b.end(), first);
  return b;
}

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = 3 + (i * 37 + salt * 101) % 900;
  return p;
}

TEST(EmulatedModelTest, ADecodeStepTakesTheStepFormulasTime) {
  Emulated e;
  const auto table0 = Blocks(0, 8);
  const auto table1 = Blocks(8, 8);
  const auto p0 = Prompt(40, 0);
  const auto p1 = Prompt(70, 1);
  PackedBatch prefill;
  prefill.Add(p0, 0, table0, true);
  prefill.Add(p1, 0, table1, true);
  // Two chunks from position 0: P = 110, A_prefill = 40*41/2 + 70*71/2.
  const StepWork chunks{.prefill_tokens = 110, .prefill_attention = 820 + 2485};
  EXPECT_NEAR(e.ForwardMs(prefill), TestProfile().timing.StepMs(chunks), 1e-3);
  // Two decodes at positions 40 and 70 and a chunk of 30 after 50 cached tokens.
  PackedBatch mixed;
  const std::vector<int32_t> t0 = {5}, t1 = {6};
  mixed.Add(t0, 40, table0, true, /*decode=*/true);
  mixed.Add(t1, 70, table1, true, /*decode=*/true);
  const auto p2 = Prompt(80, 2);
  const auto table2 = Blocks(16, 8);
  PackedBatch warm;
  warm.Add(absl::MakeConstSpan(p2).subspan(0, 50), 0, table2, false);
  e.ForwardMs(warm);
  mixed.Add(absl::MakeConstSpan(p2).subspan(50, 30), 50, table2, true);
  const StepWork work{.decode = 2,
                      .prefill_tokens = 30,
                      .decode_attention = 41 + 71,
                      .prefill_attention = 30 * 50 + 30 * 31 / 2};
  EXPECT_NEAR(e.ForwardMs(mixed), TestProfile().timing.StepMs(work), 1e-3);
  EXPECT_NEAR(e.model->ModelledMs(mixed), TestProfile().timing.StepMs(work), 1e-9);
}

TEST(EmulatedModelTest, APrefillWorkersBatchTakesThePrefillFormulasTimeWithLayersInStep) {
  Emulated e("prefill");
  PackedBatch batch;
  const auto table0 = Blocks(0, 16);
  const auto table1 = Blocks(16, 16);
  batch.Add(Prompt(200, 0), 0, table0, true);
  batch.Add(Prompt(120, 1), 0, table1, true);
  const PerfProfile profile = TestProfile();
  const double expected = profile.timing.PrefillBatchMs(
      std::vector<PrefillPiece>{{.tokens = 200, .cached = 0}, {.tokens = 120, .cached = 0}});
  EXPECT_NEAR(expected, 0.3 + 0.016 * 320 + 3e-7 * (200 * 200 + 120 * 120), 1e-9);
  std::vector<absl::Time> announced;
  ForwardOptions options;
  options.layer_hook = [&](int layer) {
    announced.push_back(e.clock.Now());
    return layer < 100;
  };
  const absl::Time start = e.clock.Now();
  Logits logits;
  ASSERT_TRUE(e.model->Forward(batch, *e.pool, options, &logits).ok());
  EXPECT_NEAR(absl::ToDoubleMilliseconds(e.clock.Now() - start), expected, 1e-3);
  // Layer l is announced at (l + 1) / layers of the step, as the simulator's link assumes.
  ASSERT_EQ(announced.size(), 8u);
  for (int l = 0; l < 8; ++l) {
    EXPECT_NEAR(absl::ToDoubleMilliseconds(announced[l] - start), expected * (l + 1) / 8, 1e-3)
        << "layer " << l;
  }
  // A hook that says stop cancels the forward.
  options.layer_hook = [](int layer) { return layer < 3; };
  EXPECT_EQ(e.model->Forward(batch, *e.pool, options, &logits).code(),
            absl::StatusCode::kCancelled);
}

TEST(EmulatedModelTest, ChunkedBatchedAndCachedPrefillsGiveTheSameTokens) {
  const auto prompt = Prompt(100, 7);
  // Whole, alone.
  Emulated a;
  std::vector<int32_t> whole;
  PackedBatch one;
  const auto table = Blocks(0, 8);
  one.Add(prompt, 0, table, true);
  a.ForwardMs(one, &whole);
  // In three chunks, in a batch with another sequence, in other blocks.
  Emulated b;
  const auto other = Prompt(64, 3);
  const auto table_b = Blocks(20, 8);
  const auto table_other = Blocks(40, 8);
  std::vector<int32_t> out;
  for (int start : {0, 33, 77}) {
    const int n = start == 77 ? 23 : (start == 0 ? 33 : 44);
    PackedBatch batch;
    batch.Add(other, 0, table_other, true);
    batch.Add(absl::MakeConstSpan(prompt).subspan(start, n), start, table_b, start == 77);
    b.ForwardMs(batch, &out);
  }
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1], whole[0]);
  // A prefix cache hit: the first 96 positions' blocks copied (as a transfer would), the last
  // 4 tokens computed.
  auto copy_prefix = [&](Emulated& to) {
    for (int layer = 0; layer < a.model->config().num_layers; ++layer) {
      for (int kv = 0; kv < 2; ++kv) {
        for (int blk = 0; blk < 6; ++blk) {
          std::memcpy(to.pool->Region(layer, kv, 100 + blk), a.pool->Region(layer, kv, blk),
                      a.pool->layout().region_bytes());
        }
      }
    }
  };
  Emulated c;
  copy_prefix(c);
  const auto table_c = Blocks(100, 8);
  PackedBatch tail;
  tail.Add(absl::MakeConstSpan(prompt).subspan(96, 4), 96, table_c, true);
  c.ForwardMs(tail, &out);
  EXPECT_EQ(out[0], whole[0]);
  // One wrong bit in a layer's K or V of the copied prefix changes the token.
  for (int kv = 0; kv < 2; ++kv) {
    Emulated d;
    copy_prefix(d);
    // Position 95 (the last cached one) of layer 5: block 105, offset 15.
    d.pool->Region(5, kv, 105)[15 * d.pool->layout().token_bytes() + 2] ^= 0x10;
    d.ForwardMs(tail, &out);
    EXPECT_NE(out[0], whole[0]) << (kv == 0 ? "K" : "V");
  }
}

TEST(EmulatedModelTest, TokensAreDrawnFromTheTokenizersIdsAndNeverAnEndOfSequence) {
  Emulated e("decode", /*output_vocab=*/50);
  std::vector<int32_t> sequence = Prompt(20, 9);
  const auto table = Blocks(0, 64);
  PackedBatch first;
  first.Add(sequence, 0, table, true);
  std::vector<int32_t> out;
  e.ForwardMs(first, &out);
  std::set<int32_t> seen;
  for (int step = 0; step < 400; ++step) {
    ASSERT_GE(out[0], 0);
    ASSERT_LT(out[0], 50);
    ASSERT_NE(out[0], 2) << "the end-of-sequence id";
    seen.insert(out[0]);
    sequence.push_back(out[0]);
    PackedBatch next;
    next.Add(absl::MakeConstSpan(&sequence.back(), 1), static_cast<int32_t>(sequence.size()) - 1,
             table, true, /*decode=*/true);
    e.ForwardMs(next, &out);
  }
  EXPECT_GT(seen.size(), 30u) << "a hash spreads over the ids";
}

TEST(EmulatedModelTest, SeededSamplingDependsOnTheSeedAndIsRepeatable) {
  const auto prompt = Prompt(30, 4);
  const auto table = Blocks(0, 4);
  auto sample = [&](float temperature, uint64_t seed) {
    Emulated e;
    PackedBatch batch;
    batch.Add(prompt, 0, table, true);
    SamplingConfig config;
    config.temperature = temperature;
    config.seed = seed;
    const RowSampling rows[] = {{&config, 30}};
    ForwardOptions options;
    options.sample_rows = rows;
    Logits logits;
    EXPECT_TRUE(e.model->Forward(batch, *e.pool, options, &logits).ok());
    EXPECT_TRUE(logits.data.empty()) << "tokens come sampled, without logits";
    return logits.sampled.at(0);
  };
  EXPECT_EQ(sample(0.8f, 11), sample(0.8f, 11));
  int differs = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) differs += sample(0.8f, seed) != sample(0, 0);
  EXPECT_GE(differs, 6);
}

TEST(EmulatedModelTest, FingerprintIsTheSameForBothRolesAndChangesWithTheProfile) {
  EmulatedModelOptions o;
  o.profile = TestProfile();
  auto decode = *EmulatedModel::Create(BaseConfig(), o);
  o.timing = "prefill";
  auto prefill = *EmulatedModel::Create(BaseConfig(), o);
  EXPECT_EQ(decode->fingerprint(), prefill->fingerprint());
  EXPECT_EQ(decode->kv_pool_hint().num_blocks, 4096);
  EXPECT_EQ(prefill->kv_pool_hint().num_blocks, 1024);
  EXPECT_EQ(prefill->kv_pool_hint().block_size, 16);
  o.profile.timing.step_intercept_ms = 6;
  auto other = *EmulatedModel::Create(BaseConfig(), o);
  EXPECT_NE(other->fingerprint(), decode->fingerprint());
  // The stand-in KV: 16 bytes per layer and K|V by default, the profile's own 128 KiB per token
  // for what it stands for.
  EXPECT_EQ(decode->kv_bytes_per_token(DType::kF32), 2 * 8 * 8);
  EXPECT_EQ(decode->profile_kv_bytes_per_token(), 2 * 8 * 8 * 128 * 2);
}

TEST(EmulatedModelTest, BadOptionsNameTheirFlag) {
  EmulatedModelOptions o;
  o.profile = TestProfile();
  o.kv_bytes_per_token = 100;  // Not a multiple of 2 * 8 layers * 4 bytes.
  auto bad = EmulatedModel::Create(BaseConfig(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--emulated_kv_bytes_per_token"), std::string::npos);
  o.kv_bytes_per_token = 0;
  o.jitter = -1;
  bad = EmulatedModel::Create(BaseConfig(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--emulated_jitter"), std::string::npos);
  // Through the loader: no profile, a missing one, a malformed one.
  EngineOptions engine;
  engine.backend = "emulated";
  const std::string dir = pdserve::testing::TestModelDir("micro");
  auto loaded = LoadModel(dir, engine);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("--profile: required"), std::string::npos);
  engine.emulated.profile_path = "/nonexistent/profile.json";
  loaded = LoadModel(dir, engine);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("--profile"), std::string::npos);
  engine.emulated.profile_path = std::string(PDSERVE_SOURCE_DIR) + "/deploy/profiles/roofline.py";
  loaded = LoadModel(dir, engine);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("roofline.py"), std::string::npos);
  engine.backend = "cpu";
  loaded = LoadModel(dir, engine);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("--profile: only the emulated backend"),
            std::string::npos);
}

TEST(EmulatedModelTest, LoadsFromAModelDirectoryWithTheProfilesLayersAndTheTokenizersIds) {
  EngineOptions engine;
  engine.backend = "emulated";
  engine.emulated.profile_path =
      std::string(PDSERVE_SOURCE_DIR) + "/deploy/profiles/h100-llama3-8b.json";
  const std::string dir = pdserve::testing::TestModelDir("micro");
  auto loaded = LoadModel(dir, engine);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->model->backend_name(), "emulated");
  EXPECT_EQ(loaded->model->config().num_layers, 32);
  EXPECT_EQ(loaded->model->weight_bytes(), 0u);
  ASSERT_NE(loaded->tokenizer, nullptr);
  EXPECT_EQ(loaded->model->kv_pool_hint().num_blocks, 26674);
  EXPECT_EQ(loaded->name, "micro");
}

}  // namespace
}  // namespace pdserve::engine
