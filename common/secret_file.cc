#include "common/secret_file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

constexpr size_t kMaxSecretBytes = 4096;

}  // namespace

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, absl::string_view flag) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  const std::string secret(absl::StripAsciiWhitespace(text.str()));
  if (secret.empty())
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is empty"));
  if (secret.size() > kMaxSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": the secret in ", path, " is ",
                                                   secret.size(), " bytes, at most ",
                                                   kMaxSecretBytes));
  }
  for (char c : secret) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": the secret in ", path, " must be one word of printable ASCII"));
    }
  }
  return secret;
}

bool ConstantTimeEquals(absl::string_view given, absl::string_view expected) {
  // No early exit, and as many steps as `expected` has bytes whatever `given` is: timing does
  // not reveal how much of a guess matched.
  size_t diff = given.size() ^ expected.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    const char g = i < given.size() ? given[i] : '\0';
    diff |= static_cast<unsigned char>(g ^ expected[i]);
  }
  return diff == 0;
}

}  // namespace pdserve
