#include "tests/testing/listening_sockets.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pdserve::testing {
namespace {

constexpr char kListenState[] = "0A";  // TCP_LISTEN in /proc/net/tcp.

// The socket inodes among `pid`'s open files.
std::set<std::string> SocketInodes(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code error;
  for (const auto& fd :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), error)) {
    char target[256];
    const ssize_t n = readlink(fd.path().c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string link(target, static_cast<size_t>(n));
    if (link.rfind("socket:[", 0) == 0) inodes.insert(link.substr(8, link.size() - 9));
  }
  return inodes;
}

// /proc/net/tcp's "0100007F:1F90" (little-endian words) as "127.0.0.1:8080".
std::string DecodeAddress(const std::string& hex, bool v6) {
  const std::vector<std::string> parts = absl::StrSplit(hex, ':');
  if (parts.size() != 2) return hex;
  uint32_t port = 0;
  if (!absl::SimpleHexAtoi(parts[1], &port)) return hex;
  unsigned char bytes[16] = {};
  const size_t words = v6 ? 4 : 1;
  for (size_t w = 0; w < words && parts[0].size() >= (w + 1) * 8; ++w) {
    uint32_t word = 0;
    if (!absl::SimpleHexAtoi(parts[0].substr(w * 8, 8), &word)) return hex;
    std::memcpy(bytes + w * 4, &word, 4);  // Stored in host (little-endian) order.
  }
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(v6 ? AF_INET6 : AF_INET, bytes, text, sizeof(text));
  return v6 ? absl::StrCat("[", text, "]:", port) : absl::StrCat(text, ":", port);
}

}  // namespace

std::vector<std::string> ListeningAddresses(pid_t pid) {
  const std::set<std::string> inodes = SocketInodes(pid);
  std::vector<std::string> out;
  for (const bool v6 : {false, true}) {
    std::ifstream table(absl::StrCat("/proc/", pid, "/net/", v6 ? "tcp6" : "tcp"));
    std::string line;
    std::getline(table, line);  // Header.
    while (std::getline(table, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state == kListenState && inodes.count(inode) > 0) {
        out.push_back(DecodeAddress(local, v6));
      }
    }
  }
  return out;
}

}  // namespace pdserve::testing
