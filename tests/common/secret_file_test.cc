#include "common/secret_file.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name + std::to_string(getpid());
  std::ofstream(path) << text;
  return path;
}

TEST(SecretFileTest, OneWordOfPrintableAsciiWithoutSurroundingWhitespace) {
  const std::string good = WriteFile("good", "  s3cret-token\n");
  auto secret = ReadSecretFile(good, "--token_file");
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_EQ(*secret, "s3cret-token");
  struct Bad {
    std::string text;
    const char* message;
  };
  const Bad cases[] = {{"\n \n", "is empty"},
                       {"two words", "one word of printable ASCII"},
                       {std::string(5000, 'k'), "5000 bytes, at most 4096"}};
  for (const Bad& c : cases) {
    const std::string path = WriteFile("bad", c.text);
    auto read = ReadSecretFile(path, "--token_file");
    ASSERT_FALSE(read.ok()) << c.message;
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(read.status().message().find(std::string("--token_file: ")), std::string::npos);
    EXPECT_NE(read.status().message().find(c.message), std::string::npos) << read.status();
    std::remove(path.c_str());
  }
  EXPECT_NE(ReadSecretFile("/nonexistent/token", "--token_file")
                .status()
                .message()
                .find("cannot read /nonexistent/token"),
            std::string::npos);
  std::remove(good.c_str());
}

TEST(SecretFileTest, ConstantTimeEqualsComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abd", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abcd", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "abc"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

}  // namespace
}  // namespace pdserve
