#include "common/read_file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace pdserve {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace pdserve
