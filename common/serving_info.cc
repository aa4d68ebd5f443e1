#include "common/serving_info.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pdserve {

absl::Status WriteServingInfo(const std::string& path, const ServingInfo& info) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  absl::Status written = absl::OkStatus();
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
    for (const auto& [key, value] : info) out << key << '=' << value << '\n';
    out.flush();
    if (!out) written = absl::InternalError(absl::StrCat("write failed: ", tmp));
  }
  if (written.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    written = absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno)));
  }
  // A failed write leaves nothing behind (a 0-byte temporary file once stayed).
  if (!written.ok()) std::remove(tmp.c_str());
  return written;
}

absl::StatusOr<ServingInfo> ReadServingInfo(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no serving info at ", path));
  ServingInfo info;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    info[kv.first] = kv.second;
  }
  return info;
}

}  // namespace pdserve
