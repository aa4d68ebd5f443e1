#include "tools/client/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/net_address.h"

namespace pdserve::client {
namespace {

// The body of a chunked message starting at `pos`; false if incomplete.
bool Dechunk(const std::string& raw, size_t pos, std::string* body) {
  while (true) {
    const size_t line_end = raw.find("\r\n", pos);
    if (line_end == std::string::npos) return false;
    size_t size = 0;
    const std::string hex = raw.substr(pos, line_end - pos);
    size = std::strtoul(hex.c_str(), nullptr, 16);
    pos = line_end + 2;
    if (size == 0) return raw.find("\r\n", pos) != std::string::npos;
    if (raw.size() < pos + size + 2) return false;
    body->append(raw, pos, size);
    pos += size + 2;
  }
}

}  // namespace

HttpResponseParts ParseHttpResponse(const std::string& raw) {
  HttpResponseParts out;
  size_t start = 0;
  // Skip interim responses (100 Continue).
  while (raw.compare(start, 12, "HTTP/1.1 100") == 0) {
    const size_t end = raw.find("\r\n\r\n", start);
    if (end == std::string::npos) return out;
    start = end + 4;
  }
  const size_t head_end = raw.find("\r\n\r\n", start);
  if (head_end == std::string::npos) return out;
  std::vector<std::string> lines = absl::StrSplit(raw.substr(start, head_end - start), "\r\n");
  if (lines.empty()) return out;
  std::vector<std::string> status_line = absl::StrSplit(lines[0], ' ');
  if (status_line.size() < 2 || !absl::SimpleAtoi(status_line[1], &out.status)) return out;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    out.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  const size_t body_start = head_end + 4;
  if (out.headers["transfer-encoding"] == "chunked") {
    out.complete = Dechunk(raw, body_start, &out.body);
    return out;
  }
  size_t length = 0;
  if (absl::SimpleAtoi(out.headers["content-length"], &length)) {
    out.body = raw.substr(body_start, length);
    out.complete = raw.size() >= body_start + length;
  } else {
    out.body = raw.substr(body_start);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<HttpConnection>> HttpConnection::Open(const std::string& address) {
  auto parsed = ParseHostPort(address, "address");
  if (!parsed.ok()) return parsed.status();
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(parsed->port));
  ::inet_pton(AF_INET, parsed->host.c_str(), &sa.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("connect ", address, ": errno ", err));
  }
  return std::unique_ptr<HttpConnection>(new HttpConnection(fd));
}

HttpConnection::~HttpConnection() { Close(); }

void HttpConnection::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::Status HttpConnection::Send(absl::string_view bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("send: errno ", errno));
    }
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

bool HttpConnection::ReadSome(absl::Duration timeout) {
  if (fd_ < 0 || peer_closed_) return false;
  pollfd p{fd_, POLLIN, 0};
  const int ready = ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  if (ready <= 0) return false;
  char buf[16384];
  const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
  if (n <= 0) {
    peer_closed_ = true;
    return false;
  }
  received_.append(buf, static_cast<size_t>(n));
  return true;
}

void HttpConnection::ReadAvailable() {
  while (ReadSome(absl::ZeroDuration())) {
  }
}

const std::string& HttpConnection::ReadUntil(const std::function<bool(const std::string&)>& done,
                                             absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done(received_) && !peer_closed_) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    ReadSome(std::min(left, absl::Milliseconds(100)));
  }
  return received_;
}

HttpResponseParts HttpConnection::ReadResponse(absl::Duration timeout) {
  ReadUntil([](const std::string& r) { return ParseHttpResponse(r).complete; }, timeout);
  return ParseHttpResponse(received_);
}

bool HttpConnection::WaitClosed(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!peer_closed_ && absl::Now() < deadline) ReadSome(absl::Milliseconds(50));
  return peer_closed_;
}

std::string HttpRequestBytes(const std::string& method, const std::string& path,
                             const std::string& body, const std::string& extra_headers,
                             bool keep_alive) {
  return absl::StrCat(
      method, " ", path, " HTTP/1.1\r\nHost: test\r\n",
      body.empty() && method == "GET"
          ? ""
          : absl::StrCat("Content-Type: application/json\r\nContent-Length: ", body.size(), "\r\n"),
      keep_alive ? "" : "Connection: close\r\n", extra_headers, "\r\n", body);
}

absl::StatusOr<HttpResponseParts> HttpCall(const std::string& address, const std::string& method,
                                           const std::string& path, const std::string& body,
                                           const std::string& extra_headers,
                                           absl::Duration timeout) {
  auto connection = HttpConnection::Open(address);
  if (!connection.ok()) return connection.status();
  if (absl::Status s =
          (*connection)->Send(HttpRequestBytes(method, path, body, extra_headers, false));
      !s.ok())
    return s;
  HttpResponseParts parts = (*connection)->ReadResponse(timeout);
  if (!parts.complete) return absl::DeadlineExceededError("no complete response");
  return parts;
}

}  // namespace pdserve::client
