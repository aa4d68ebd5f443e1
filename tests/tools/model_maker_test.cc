#include "tools/make_model/model_maker.h"

#include <filesystem>

#include "engine/model_loader.h"
#include "gtest/gtest.h"
#include "tools/make_model/bpe_trainer.h"
#include "tools/make_model/corpus.h"

namespace pdserve::tools {
namespace {

TEST(BpeTrainerTest, LearnsFrequentPairsFirstAndDeterministically) {
  const std::string corpus = "low low low lower lowest newer newer wider";
  auto a = TrainBpe(corpus, "\\s?\\p{L}+", 270);
  auto b = TrainBpe(corpus, "\\s?\\p{L}+", 270);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->merges, b->merges);
  ASSERT_FALSE(a->merges.empty());
  // "Ġl" + "o" style pairs: the most frequent pair involves the repeated "low".
  EXPECT_EQ(a->merges[0].first + a->merges[0].second, "lo");
  EXPECT_EQ(a->tokens.size(), 256u + std::min<size_t>(a->merges.size(), 14));
}

TEST(CorpusTest, IsSeededAndMixed) {
  const std::string a = GenerateCorpus(5, 20000), b = GenerateCorpus(5, 20000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, GenerateCorpus(6, 20000));
  EXPECT_GE(a.size(), 20000u);
  EXPECT_NE(a.find('\n'), std::string::npos);
  bool non_ascii = false;
  for (unsigned char c : a) non_ascii |= c >= 0x80;
  EXPECT_TRUE(non_ascii);
}

// A one-layer model that writes in milliseconds.
ModelSpec MiniSpec() {
  ModelSpec spec;
  spec.hidden_size = 32;
  spec.num_layers = 1;
  spec.num_heads = 2;
  spec.num_kv_heads = 1;
  spec.head_dim = 16;
  spec.intermediate_size = 64;
  spec.vocab_size = 300;
  spec.corpus_bytes = 20000;
  return spec;
}

TEST(ModelMakerTest, WritesALoadableModelOfTheRequestedShape) {
  ModelSpec spec = MiniSpec();
  spec.architecture = "qwen3";
  spec.shards = 2;
  const std::string dir = ::testing::TempDir() + "/made-model";
  std::filesystem::remove_all(dir);
  auto made = WriteModel(spec, dir);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(made->vocab_size, 300);
  EXPECT_TRUE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
  auto loaded = engine::LoadModel(dir, engine::EngineOptions{.num_threads = 1});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->model->config().architecture, "Qwen3ForCausalLM");
  EXPECT_TRUE(loaded->model->config().qk_norm);
  EXPECT_EQ(loaded->tokenizer->vocab_size(), 300);
  EXPECT_EQ(loaded->eos_token_ids.size(), 2u);
  // EnsureModel leaves an existing model alone.
  const auto mtime = std::filesystem::last_write_time(dir + "/config.json");
  ASSERT_TRUE(EnsureModel(spec, dir).ok());
  EXPECT_EQ(std::filesystem::last_write_time(dir + "/config.json"), mtime);
  std::filesystem::remove_all(dir);
}

// A padded vocabulary: config.json and the embedding rows take the padded size, the
// tokenizer keeps its trained one, and the model loads and runs.
TEST(ModelMakerTest, PadsTheVocabularyBeyondTheTokenizer) {
  ModelSpec spec = MiniSpec();
  spec.padded_vocab_size = 1000;
  const std::string dir = ::testing::TempDir() + "/padded-model";
  auto made = WriteModel(spec, dir);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(made->vocab_size, 1000);
  auto loaded = engine::LoadModel(dir, engine::EngineOptions{.num_threads = 1});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->model->config().vocab_size, 1000);
  ASSERT_NE(loaded->tokenizer, nullptr);
  EXPECT_LE(loaded->tokenizer->vocab_size(), 300);
  std::filesystem::remove_all(dir);
}

// Without weights: the router's and the emulated backend's model directory, in kilobytes.
TEST(ModelMakerTest, WithoutWeightsWritesTheConfigAndTokenizerOnly) {
  ModelSpec spec = MiniSpec();
  spec.weights = false;
  spec.max_position_embeddings = 131072;
  const std::string dir = ::testing::TempDir() + "/config-only-model";
  std::filesystem::remove_all(dir);
  auto made = WriteModel(spec, dir);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_GT(made->parameters, 0);
  EXPECT_TRUE(std::filesystem::exists(dir + "/config.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/tokenizer.json"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));
  EXPECT_FALSE(engine::LoadModel(dir, engine::EngineOptions{.num_threads = 1}).ok());
  engine::EngineOptions emulated;
  emulated.backend = "emulated";
  emulated.emulated.profile_path =
      std::string(PDSERVE_SOURCE_DIR) + "/deploy/profiles/h100-llama3-8b.json";
  auto loaded = engine::LoadModel(dir, emulated);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->model->config().max_position_embeddings, 131072);
  std::filesystem::remove_all(dir);
}

TEST(ModelMakerTest, SpecValidationNamesTheField) {
  ModelSpec spec;
  spec.num_kv_heads = 3;
  EXPECT_FALSE(spec.Validate().ok());
  spec = ModelSpec();
  spec.architecture = "gpt2";
  EXPECT_NE(spec.Validate().message().find("architecture"), absl::string_view::npos);
  EXPECT_FALSE(ModelSpec::Preset("huge").ok());
  auto eight = ModelSpec::Preset("8b");
  ASSERT_TRUE(eight.ok());
  EXPECT_EQ(eight->hidden_size, 4096);
  EXPECT_EQ(eight->intermediate_size, 14336);
  EXPECT_EQ(eight->padded_vocab_size, 128256);
  EXPECT_TRUE(eight->Validate().ok());
  spec = ModelSpec();
  spec.padded_vocab_size = 100;  // Below the tokenizer's vocabulary.
  EXPECT_NE(spec.Validate().message().find("padded_vocab_size: 100 is outside [1024"),
            absl::string_view::npos)
      << spec.Validate();
  auto small = ModelSpec::Preset("small");
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->hidden_size, 768);
}

}  // namespace
}  // namespace pdserve::tools
