// Loading real checkpoint layouts and every way a checkpoint can be wrong: missing, extra,
// misshapen or mistyped tensors, truncated files, broken indexes. Each gives an absl::Status
// naming the tensor and the expected versus found value, never a crash.
#include "engine/checkpoint.h"

#include <filesystem>
#include <fstream>

#include "engine/model_loader.h"
#include "engine/safetensors_writer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_models.h"

namespace pdserve::engine {
namespace {

namespace fs = std::filesystem;

// A copy of the micro model that a test may break.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/ckpt-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::copy(pdserve::testing::TestModelDir("micro"), dir_, fs::copy_options::recursive);
  }
  void TearDown() override { fs::remove_all(dir_); }

  absl::Status Load() { return LoadModel(dir_, EngineOptions{.num_threads = 1}).status(); }
  // Rewrites model.safetensors with `edit` applied to the list of tensors.
  void Rewrite(const std::function<void(SafetensorsWriter&, const SafetensorsFile&)>& edit) {
    auto file = SafetensorsFile::Open(dir_ + "/model.safetensors");
    ASSERT_TRUE(file.ok());
    SafetensorsWriter w;
    edit(w, **file);
    const std::string bytes = w.Serialize();
    file->reset();
    std::ofstream(dir_ + "/model.safetensors", std::ios::binary | std::ios::trunc) << bytes;
  }
  static void CopyAllBut(SafetensorsWriter& w, const SafetensorsFile& f, const std::string& skip) {
    for (const TensorInfo& t : f.tensors()) {
      if (t.name == skip) continue;
      auto data = f.Data(t);
      w.AddRaw(t.name, t.dtype_name, t.shape,
               std::string(reinterpret_cast<const char*>(data.data()), data.size()));
    }
  }
  void ExpectError(absl::StatusCode code, absl::string_view needle) {
    const absl::Status s = Load();
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(s.message().find(needle), absl::string_view::npos) << s;
  }
  std::string dir_;
};

TEST_F(CheckpointTest, LoadsAndFingerprintsDeterministically) {
  auto a = Checkpoint::Open(dir_);
  auto b = Checkpoint::Open(pdserve::testing::TestModelDir("micro"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->fingerprint(), (*b)->fingerprint());
  EXPECT_NE((*a)->fingerprint(), 0u);
  auto other = Checkpoint::Open(pdserve::testing::TestModelDir("tiny"));
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*a)->fingerprint(), (*other)->fingerprint());
  EXPECT_TRUE(Load().ok());
}

TEST_F(CheckpointTest, MissingTensorIsNamedWithItsExpectedShape) {
  Rewrite([](SafetensorsWriter& w, const SafetensorsFile& f) {
    CopyAllBut(w, f, "model.layers.1.mlp.up_proj.weight");
  });
  ExpectError(absl::StatusCode::kNotFound,
              "missing tensor 'model.layers.1.mlp.up_proj.weight' (expected shape [128, 64])");
}

TEST_F(CheckpointTest, ExtraTensorIsReported) {
  Rewrite([](SafetensorsWriter& w, const SafetensorsFile& f) {
    CopyAllBut(w, f, "");
    w.AddF32("model.layers.0.mystery.weight", {2}, std::vector<float>{1, 2});
  });
  ExpectError(absl::StatusCode::kInvalidArgument,
              "unexpected tensor(s) for LlamaForCausalLM: model.layers.0.mystery.weight");
}

TEST_F(CheckpointTest, WrongShapeNamesExpectedAndFound) {
  Rewrite([](SafetensorsWriter& w, const SafetensorsFile& f) {
    CopyAllBut(w, f, "model.norm.weight");
    w.AddF32("model.norm.weight", {65}, std::vector<float>(65, 1.0f));
  });
  ExpectError(absl::StatusCode::kInvalidArgument,
              "tensor 'model.norm.weight' has shape [65], expected [64]");
}

TEST_F(CheckpointTest, UnsupportedDtypeIsNamed) {
  Rewrite([](SafetensorsWriter& w, const SafetensorsFile& f) {
    CopyAllBut(w, f, "model.norm.weight");
    w.AddRaw("model.norm.weight", "I8", {64}, std::string(64, '\1'));
  });
  ExpectError(absl::StatusCode::kInvalidArgument,
              "tensor 'model.norm.weight' has dtype I8, expected one of F32, F16, BF16");
}

TEST_F(CheckpointTest, TruncatedFileIsAnError) {
  const auto size = fs::file_size(dir_ + "/model.safetensors");
  fs::resize_file(dir_ + "/model.safetensors", size - 100);
  ExpectError(absl::StatusCode::kInvalidArgument, "outside the data section");
  fs::resize_file(dir_ + "/model.safetensors", 4);
  ExpectError(absl::StatusCode::kInvalidArgument, "truncated");
}

TEST_F(CheckpointTest, MissingFilesAreNotFound) {
  fs::remove(dir_ + "/model.safetensors");
  ExpectError(absl::StatusCode::kNotFound, "no model.safetensors");
  fs::remove(dir_ + "/config.json");
  ExpectError(absl::StatusCode::kNotFound, "config.json");
}

TEST_F(CheckpointTest, ShardedCheckpointLoadsAndBrokenIndexIsNamed) {
  auto sharded = LoadModel(pdserve::testing::TestModelDir("tiny-f16-sharded"),
                           EngineOptions{.num_threads = 1});
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  // An index that points a tensor at the wrong shard.
  const std::string dir = ::testing::TempDir() + "/sharded-broken";
  fs::remove_all(dir);
  fs::copy(pdserve::testing::TestModelDir("tiny-f16-sharded"), dir, fs::copy_options::recursive);
  auto index_text = ReadFileToString(dir + "/model.safetensors.index.json");
  ASSERT_TRUE(index_text.ok());
  auto index = nlohmann::json::parse(*index_text);
  index["weight_map"]["model.norm.weight"] = "model-00003-of-00003.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json", std::ios::trunc) << index.dump();
  const absl::Status s = Checkpoint::Open(dir).status();
  EXPECT_NE(
      s.message().find("tensor 'model.norm.weight' is listed in model-00003-of-00003.safetensors"),
      absl::string_view::npos)
      << s;
  index["weight_map"]["model.norm.weight"] = "../evil.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json", std::ios::trunc) << index.dump();
  EXPECT_NE(Checkpoint::Open(dir).status().message().find("plain file name"),
            absl::string_view::npos);
  fs::remove_all(dir);
}

TEST_F(CheckpointTest, TokenizerLargerThanTheModelIsRejected) {
  auto config = nlohmann::json::parse(*ReadFileToString(dir_ + "/config.json"));
  const int vocab = config["vocab_size"];
  config["vocab_size"] = vocab - 10;
  config["eos_token_id"] = 0;
  config["bos_token_id"] = 0;
  std::ofstream(dir_ + "/config.json", std::ios::trunc) << config.dump();
  // The weights no longer fit the config either; the embedding shape is the first error.
  ExpectError(absl::StatusCode::kInvalidArgument, "model.embed_tokens.weight' has shape");
}

}  // namespace
}  // namespace pdserve::engine
