#include "common/model_config.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

nlohmann::json Llama() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", 128256},
          {"hidden_size", 4096},
          {"intermediate_size", 14336},
          {"num_hidden_layers", 32},
          {"num_attention_heads", 32},
          {"num_key_value_heads", 8},
          {"max_position_embeddings", 131072},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"bos_token_id", 128000},
          {"eos_token_id", {128001, 128008, 128009}},
          {"torch_dtype", "bfloat16"},
          {"rope_scaling",
           {{"factor", 8.0},
            {"low_freq_factor", 1.0},
            {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 8192},
            {"rope_type", "llama3"}}}};
}

absl::StatusOr<ModelConfig> Parse(const nlohmann::json& j) {
  return ModelConfig::FromJson(j.dump());
}

void ExpectError(const nlohmann::json& j, absl::string_view needle) {
  auto c = Parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find(needle), absl::string_view::npos) << c.status();
}

TEST(ModelConfigTest, Llama31) {
  auto c = Parse(Llama());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_EQ(c->torch_dtype, DType::kBF16);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_NEAR(c->NumParameters() / 1e9, 8.03, 0.01);
}

TEST(ModelConfigTest, Qwen2HasQkvBiasAndNoOBias) {
  auto j = Llama();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["rope_scaling"] = nullptr;
  j["use_sliding_window"] = false;
  j["sliding_window"] = 131072;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
}

TEST(ModelConfigTest, Qwen3HasQkNormAndExplicitHeadDim) {
  auto j = Llama();
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 64;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->q_dim(), 32 * 64);
}

TEST(ModelConfigTest, MistralSlidingWindowIsRejectedUntilSupported) {
  auto j = Llama();
  j["architectures"] = {"MistralForCausalLM"};
  j["sliding_window"] = 4096;
  ExpectError(j, "sliding_window: sliding-window attention is not supported");
  j["sliding_window"] = nullptr;
  EXPECT_TRUE(Parse(j).ok());
}

TEST(ModelConfigTest, ErrorsNameTheField) {
  auto j = Llama();
  j["architectures"] = {"GPT2LMHeadModel"};
  ExpectError(j, "architectures: 'GPT2LMHeadModel' is not supported");
  j = Llama();
  j.erase("hidden_size");
  ExpectError(j, "hidden_size: missing");
  j = Llama();
  j["num_key_value_heads"] = 7;
  ExpectError(j, "num_key_value_heads: 7 must divide num_attention_heads 32");
  j = Llama();
  j["vocab_size"] = "many";
  ExpectError(j, "vocab_size: expected an integer");
  j = Llama();
  j["rope_scaling"]["rope_type"] = "yarn";
  ExpectError(j, "rope_scaling.rope_type: 'yarn' is not supported");
  j = Llama();
  j["eos_token_id"] = 999999;
  ExpectError(j, "eos_token_id: 999999 is outside");
  ExpectError(nlohmann::json::array(), "not a JSON object");
  // Absurd dimensions are errors, not aborts when buffers are sized from them.
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "max_position_embeddings"}) {
    j = Llama();
    j[field] = 2147483647;
    ExpectError(j, field);
    j[field] = int64_t{1} << 40;
    ExpectError(j, field);
  }
  EXPECT_FALSE(ModelConfig::FromJson("{").ok());
}

}  // namespace
}  // namespace pdserve
