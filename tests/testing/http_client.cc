#include "tests/testing/http_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/net_address.h"
#include "tests/testing/poll.h"

namespace pdserve::testing {

absl::StatusOr<HttpResponse> HttpGet(const std::string& address, const std::string& path,
                                     absl::Duration timeout) {
  auto host_port = ParseHostPort(address, "address");
  if (!host_port.ok()) return host_port.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const std::string port = absl::StrCat(host_port->port);
  if (getaddrinfo(host_port->host.c_str(), port.c_str(), &hints, &result) != 0 || !result) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", address));
  }
  const int fd = socket(result->ai_family, SOCK_STREAM, 0);
  timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const int rc = connect(fd, result->ai_addr, result->ai_addrlen);
  freeaddrinfo(result);
  if (rc != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("connect ", address, ": ", std::strerror(errno)));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", address, "\r\nConnection: close\r\n\r\n");
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return absl::UnavailableError("send failed");
  }
  std::string raw;
  char buffer[16384];
  while (true) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    raw.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  const size_t header_end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || header_end == std::string::npos) {
    return absl::DataLossError(absl::StrCat("malformed HTTP response from ", address));
  }
  HttpResponse response;
  const size_t space = raw.find(' ');
  if (!absl::SimpleAtoi(raw.substr(space + 1, 3), &response.status)) {
    return absl::DataLossError("malformed HTTP status line");
  }
  response.body = raw.substr(header_end + 4);
  return response;
}

double Metric(const std::string& metrics_address, const std::string& prefix) {
  auto page = HttpGet(metrics_address, "/metrics", absl::Seconds(5));
  if (!page.ok()) return -1;
  for (absl::string_view line : absl::StrSplit(page->body, '\n')) {
    if (!absl::StartsWith(line, prefix)) continue;
    double v;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) return v;
  }
  return -1;
}

bool WaitForMetricAtLeast(const std::string& metrics_address, const std::string& prefix, double min,
                          absl::Duration timeout) {
  return PollUntil([&] { return Metric(metrics_address, prefix) >= min; }, timeout,
                   absl::Milliseconds(10));
}

}  // namespace pdserve::testing
