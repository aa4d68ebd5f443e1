#include "text/tokenizer.h"

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_models.h"
#include "text/bpe.h"
#include "text/pretokenizer.h"

namespace pdserve::text {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Pieces(absl::string_view pattern, absl::string_view text) {
  auto pre = RegexPreTokenizer::Create(pattern);
  EXPECT_TRUE(pre.ok()) << pre.status();
  std::vector<absl::string_view> views;
  (*pre)->Split(text, &views);
  return std::vector<std::string>(views.begin(), views.end());
}

TEST(PreTokenizerTest, Gpt2PatternWithLookaheadEmulation) {
  const auto p = RegexPreTokenizer::kGpt2Pattern;
  EXPECT_THAT(Pieces(p, "Hello world"), ElementsAre("Hello", " world"));
  // `\s+(?!\S)`: a run of spaces before a word gives its last space to the word.
  EXPECT_THAT(Pieces(p, "a   b"), ElementsAre("a", "  ", " b"));
  EXPECT_THAT(Pieces(p, "a b"), ElementsAre("a", " b"));
  EXPECT_THAT(Pieces(p, "end   "), ElementsAre("end", "   "));
  EXPECT_THAT(Pieces(p, "I'm here's"), ElementsAre("I", "'m", " here", "'s"));
  EXPECT_THAT(Pieces(p, "x  123"), ElementsAre("x", " ", " 123"));
}

TEST(PreTokenizerTest, UnicodeWhitespaceIsWhitespace) {
  // U+3000 and U+00A0 are White_Space to Hugging Face's regex engines; RE2's \s is ASCII only,
  // so the rewrite must cover them. Were they not whitespace, GPT-2's ` ?[^\s\p{L}\p{N}]+`
  // would glue the two U+3000 into one piece.
  const auto p = RegexPreTokenizer::kGpt2Pattern;
  EXPECT_THAT(Pieces(p, "a\u3000\u3000b"), ElementsAre("a", "\u3000", "\u3000", "b"));
  EXPECT_THAT(Pieces(p, "a\u00a0b"), ElementsAre("a", "\u00a0", "b"));
  // Llama 3's `[^\r\n\p{L}\p{N}]?\p{L}+` lets the last space join the word.
  const std::string llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  EXPECT_THAT(Pieces(llama3, "a\u3000\u3000b"), ElementsAre("a", "\u3000", "\u3000b"));
}

TEST(PreTokenizerTest, UnsupportedConstructsAreErrors) {
  EXPECT_NE(RegexPreTokenizer::Create("(?=x)a").status().message().find("lookaround"),
            absl::string_view::npos);
  EXPECT_NE(
      RegexPreTokenizer::Create("[\\S]").status().message().find("\\S inside a character class"),
      absl::string_view::npos);
  EXPECT_NE(RegexPreTokenizer::Create("(unclosed").status().message().find("does not compile"),
            absl::string_view::npos);
  bool lookahead = false;
  auto rewritten = RewritePatternForRe2("(a)|\\s+(?!\\S)|\\s+", &lookahead);
  ASSERT_TRUE(rewritten.ok());
  EXPECT_TRUE(lookahead);
  EXPECT_EQ(rewritten->rfind("(?:a)", 0), 0u);  // User groups become non-capturing.
}

class GeneratedTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::FromFile(pdserve::testing::TestModelDir("tiny") + "/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = *std::move(tok);
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(GeneratedTokenizerTest, RoundTripsArbitraryText) {
  const std::vector<std::string> texts = {
      "The quick brown fox.", "  spaces\t\ttabs\r\n", "中文 🦙 café",
      std::string("\x00\x01\xff binary", 10), "<|eot_id|> inline special"};
  for (const std::string& text : texts) {
    auto ids = tokenizer_->Encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    auto back = tokenizer_->Decode(*ids, /*skip_special_tokens=*/false);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, text);
  }
}

TEST_F(GeneratedTokenizerTest, BosAndSpecialTokens) {
  const int32_t bos = *tokenizer_->TokenToId("<|begin_of_text|>");
  const int32_t eot = *tokenizer_->TokenToId("<|eot_id|>");
  auto ids = tokenizer_->Encode("hi<|eot_id|>", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), bos);
  EXPECT_EQ(ids->back(), eot);
  EXPECT_EQ(tokenizer_->prefix_ids(), std::vector<int32_t>{bos});
  // Special tokens are skipped in output text by default.
  EXPECT_EQ(*tokenizer_->Decode(*ids), "hi");
  EXPECT_TRUE(tokenizer_->IsSpecial(eot));
}

TEST_F(GeneratedTokenizerTest, UnknownIdIsAnError) {
  auto decoded = tokenizer_->Decode(std::vector<int32_t>{1, tokenizer_->vocab_size() + 5});
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(decoded.status().message().find("not in the vocabulary"), absl::string_view::npos);
  IncrementalDetokenizer detok(tokenizer_.get());
  EXPECT_FALSE(detok.Push(-1).ok());
}

TEST_F(GeneratedTokenizerTest, IncrementalDetokenizerHoldsPartialCodePoints) {
  // Feed the bytes of "é🦙" one byte token at a time.
  const std::string text = "é🦙";
  std::vector<int32_t> byte_ids;
  for (unsigned char c : text) {
    // Byte tokens are the first 256 ids of the generated vocabulary, in byte order.
    byte_ids.push_back(c);
  }
  IncrementalDetokenizer detok(tokenizer_.get());
  std::vector<std::string> pieces;
  for (int32_t id : byte_ids) pieces.push_back(*detok.Push(id));
  EXPECT_THAT(pieces, ElementsAre("", "é", "", "", "", "🦙"));
  // A lone continuation byte and a truncated sequence become U+FFFD.
  EXPECT_EQ(*detok.Push(0x80), "\xEF\xBF\xBD");
  EXPECT_EQ(*detok.Push(0xE4), "");
  EXPECT_EQ(detok.Flush(), "\xEF\xBF\xBD");
}

absl::Status FromJson(const nlohmann::json& j) { return Tokenizer::FromJson(j.dump()).status(); }

// Prompts of long unique "words" once grew the router's memory for good (the word cache was
// bounded in entries, not bytes). The cache holds at most 8 MiB and never long words.
TEST(BpeCacheTest, BoundedInBytesAndSkipsLongWords) {
  absl::flat_hash_map<std::string, int32_t> vocab;
  for (char c = 'a'; c <= 'z'; ++c) vocab[std::string(1, c)] = c - 'a';
  auto bpe = BpeModel::Create(vocab, {}, /*ignore_merges=*/false);
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  std::vector<int32_t> ids;
  ASSERT_TRUE((*bpe)->Encode(std::string(1000, 'q'), &ids).ok());
  EXPECT_EQ(ids.size(), 1000u);
  EXPECT_EQ((*bpe)->cache_bytes(), 0u);
  std::mt19937 rng(1);
  size_t most = 0;
  for (int i = 0; i < 60000; ++i) {
    std::string word(200, 'a');
    for (char& c : word) c = static_cast<char>('a' + rng() % 26);
    ids.clear();
    ASSERT_TRUE((*bpe)->Encode(word, &ids).ok());
    most = std::max(most, (*bpe)->cache_bytes());
  }
  EXPECT_GT(most, size_t{4} << 20);  // It does cache.
  EXPECT_LE(most, size_t{8} << 20);
}

TEST(TokenizerJsonTest, UnsupportedComponentsAreNamed) {
  auto base = [] {
    return nlohmann::json{
        {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", nlohmann::json::array()}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}}}};
  };
  EXPECT_TRUE(FromJson(base()).ok());
  auto j = base();
  j["model"]["type"] = "Unigram";
  EXPECT_NE(FromJson(j).message().find("model type 'Unigram'"), absl::string_view::npos);
  j = base();
  j["model"]["byte_fallback"] = true;
  EXPECT_NE(FromJson(j).message().find("byte_fallback"), absl::string_view::npos);
  j = base();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_NE(FromJson(j).message().find("pre_tokenizer type 'Metaspace'"), absl::string_view::npos);
  j = base();
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_NE(FromJson(j).message().find("normalizer type 'Lowercase'"), absl::string_view::npos);
  j = base();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_NE(FromJson(j).message().find("decoder type 'WordPiece'"), absl::string_view::npos);
  j = base();
  j["model"]["merges"] = {"a b"};
  EXPECT_NE(FromJson(j).message().find("not in the vocab"), absl::string_view::npos);
  j = base();
  j["model"]["vocab"]["b"] = -4;
  EXPECT_NE(FromJson(j).message().find("vocab id -4"), absl::string_view::npos);
  EXPECT_FALSE(Tokenizer::FromJson("{not json").ok());
  EXPECT_FALSE(Tokenizer::FromJson("[]").ok());
  j = base();
  j["added_tokens"] = {{{"id", "x"}}};
  EXPECT_NE(FromJson(j).message().find("added_tokens"), absl::string_view::npos);
}

}  // namespace
}  // namespace pdserve::text
