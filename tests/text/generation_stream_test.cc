#include "text/generation_stream.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/test_models.h"
#include "text/sampling_config.h"
#include "text/tokenizer.h"

namespace pdserve::text {
namespace {

TEST(SamplingConfigTest, ValidationNamesTheFieldAndLimit) {
  auto message = [](SamplingConfig c) { return std::string(c.Validate(100).message()); };
  SamplingConfig c;
  c.max_tokens = 0;
  EXPECT_EQ(message(c), "sampling.max_tokens: 0 must be >= 1");
  c = {};
  c.temperature = -0.5f;
  EXPECT_EQ(message(c), "sampling.temperature: -0.5 must be >= 0");
  c = {};
  c.top_p = 0;
  EXPECT_EQ(message(c), "sampling.top_p: 0 is outside (0, 1]");
  c.top_p = 1.5f;
  EXPECT_EQ(message(c), "sampling.top_p: 1.5 is outside (0, 1]");
  c = {};
  c.top_k = -2;
  EXPECT_NE(message(c).find("sampling.top_k"), std::string::npos);
  c = {};
  c.stop_token_ids = {100};
  EXPECT_EQ(message(c), "sampling.stop_token_ids: 100 is outside [0, 100)");
  c = {};
  c.stop = std::vector<std::string>(17, "x");
  EXPECT_EQ(message(c), "sampling.stop: 17 strings, at most 16");
  c = {};
  c.stop = {""};
  EXPECT_NE(message(c).find("1 to 256 bytes"), std::string::npos);
  EXPECT_TRUE(SamplingConfig{}.Validate(100).ok());
}

class GenerationStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::FromFile(pdserve::testing::TestModelDir("tiny") + "/tokenizer.json");
    ASSERT_TRUE(tok.ok());
    tokenizer_ = *std::move(tok);
  }
  // Pushes byte tokens spelling `text` (ids 0..255 are the byte tokens).
  std::string Feed(GenerationStream& stream, const std::string& text, FinishReason* finish,
                   std::string* stop_reason = nullptr) {
    std::string out;
    for (unsigned char c : text) {
      auto u = stream.Push(c);
      EXPECT_TRUE(u.ok());
      out += u->text;
      if (u->finish != FinishReason::kNone) {
        *finish = u->finish;
        if (stop_reason) *stop_reason = u->stop_reason;
        return out;
      }
    }
    *finish = FinishReason::kNone;
    return out;
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(GenerationStreamTest, StopStringIsCutAndHeldBackTextNeverLeaks) {
  SamplingConfig c;
  c.max_tokens = 100;
  c.stop = {"END", "\n\n"};
  GenerationStream stream(tokenizer_.get(), c, {});
  FinishReason finish;
  std::string reason;
  // "EN" could start "END": it must be held back, then released when "EX" rules it out.
  std::string out = Feed(stream, "hello EN", &finish);
  EXPECT_EQ(out, "hello ");
  out += Feed(stream, "X world END tail", &finish, &reason);
  EXPECT_EQ(out, "hello ENX world ");
  EXPECT_EQ(finish, FinishReason::kStop);
  EXPECT_EQ(reason, "END");
}

TEST_F(GenerationStreamTest, MaxTokensFlushesHeldText) {
  SamplingConfig c;
  c.max_tokens = 4;
  c.stop = {"xyz"};
  GenerationStream stream(tokenizer_.get(), c, {});
  FinishReason finish;
  EXPECT_EQ(Feed(stream, "abxy", &finish), "abxy");
  EXPECT_EQ(finish, FinishReason::kLength);
}

TEST_F(GenerationStreamTest, EosStopTokensAndIgnoreEos) {
  const int32_t eos = *tokenizer_->TokenToId("<|end_of_text|>");
  SamplingConfig c;
  c.max_tokens = 10;
  c.stop_token_ids = {'q'};
  GenerationStream stream(tokenizer_.get(), c, {eos});
  EXPECT_EQ(stream.Push('a')->text, "a");
  auto u = stream.Push(eos);
  EXPECT_EQ(u->finish, FinishReason::kEos);
  EXPECT_EQ(u->text, "");
  GenerationStream stops(tokenizer_.get(), c, {eos});
  u = stops.Push('q');
  EXPECT_EQ(u->finish, FinishReason::kStop);
  EXPECT_EQ(u->stop_reason, std::to_string('q'));
  c.ignore_eos = true;
  GenerationStream ignoring(tokenizer_.get(), c, {eos});
  EXPECT_EQ(ignoring.Push(eos)->finish, FinishReason::kNone);
}

TEST_F(GenerationStreamTest, MultiByteCharactersAreNeverSplitAroundStops) {
  SamplingConfig c;
  c.max_tokens = 100;
  c.stop = {"!!"};
  GenerationStream stream(tokenizer_.get(), c, {});
  FinishReason finish;
  EXPECT_EQ(Feed(stream, "é🦙!!", &finish), "é🦙");
  EXPECT_EQ(finish, FinishReason::kStop);
}

}  // namespace
}  // namespace pdserve::text
