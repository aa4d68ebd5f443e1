#include "common/net_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pdserve {

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text, absl::string_view field) {
  HostPort out;
  absl::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat(field, ": '", text, "' is not [ipv6]:port"));
    }
    out.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": '", text, "' has no port (expected host:port)"));
    }
    out.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
    if (out.host.find(':') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": '", text, "': bracket IPv6 addresses as [addr]:port"));
    }
  }
  int port = -1;
  if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": port '", port_text, "' is not in [0, 65535]"));
  }
  out.port = port;
  return out;
}

bool IsLoopbackHost(absl::string_view host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr v4;
  const std::string text(host);
  return inet_pton(AF_INET, text.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

absl::StatusOr<std::string> LoopbackInterfaceName() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return absl::InternalError("getifaddrs failed");
  std::string name;
  for (ifaddrs* a = list; a != nullptr && name.empty(); a = a->ifa_next) {
    if ((a->ifa_flags & IFF_LOOPBACK) != 0 && a->ifa_addr != nullptr &&
        a->ifa_addr->sa_family == AF_INET) {
      name = a->ifa_name;
    }
  }
  freeifaddrs(list);
  if (name.empty()) return absl::NotFoundError("no loopback network interface");
  return name;
}

int PickFreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::string WithPort(const HostPort& address, int port) {
  HostPort copy = address;
  copy.port = port;
  if (copy.host.empty() || copy.host == "0.0.0.0") copy.host = "127.0.0.1";
  if (copy.host == "::") copy.host = "::1";
  return copy.ToString();
}

}  // namespace pdserve
