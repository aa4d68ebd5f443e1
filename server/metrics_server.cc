#include "server/metrics_server.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/fd_limits.h"
#include "common/net_address.h"
#include "common/status_macros.h"
#include "prometheus/gauge.h"
#include "prometheus/text_serializer.h"

#ifndef PDSERVE_VERSION
#define PDSERVE_VERSION "dev"
#endif

namespace pdserve {
namespace {

// A request must arrive whole within this of its connection opening (slow or idle clients
// are closed); the answer must be taken within the second.
constexpr absl::Duration kRequestTimeout = absl::Seconds(2);
constexpr absl::Duration kResponseTimeout = absl::Seconds(10);
// Headers beyond this are refused (431): a scrape's are a few hundred bytes.
constexpr size_t kMaxRequestBytes = 8192;
// How often the loop looks for connections past their deadline.
constexpr int kSweepMs = 100;

std::string HttpResponse(absl::string_view status, absl::string_view content_type,
                         absl::string_view body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen_address, std::shared_ptr<prometheus::Registry> registry,
    const std::string& component, const std::map<std::string, std::string>& build_info) {
  ASSIGN_OR_RETURN(HostPort host_port, ParseHostPort(listen_address, "metrics address"));
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->registry_ = std::move(registry);
  prometheus::BuildGauge()
      .Name("pdserve_build_info")
      .Help("Build information; the value is always 1.")
      .Register(*server->registry_)
      .Add([&] {
        std::map<std::string, std::string> labels = build_info;
        labels["version"] = PDSERVE_VERSION;
        labels["component"] = component;
        return labels;
      }())
      .Set(1);
  ASSIGN_OR_RETURN(
      server->listener_,
      TcpListener::Bind({.listen_address = listen_address,
                         .field = "metrics address",
                         .refuse_fd_at = FdBudget::ForLimit(CurrentFileLimit()).grpc_refuse_at()}));
  server->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  server->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (server->epoll_fd_ < 0 || server->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("metrics: epoll: ", std::strerror(errno)));
  }
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.fd = server->wake_fd_;
  epoll_ctl(server->epoll_fd_, EPOLL_CTL_ADD, server->wake_fd_, &wake);
  server->port_ = server->listener_->port();
  server->address_ = WithPort(host_port, server->port_);
  MetricsServer* self = server.get();
  server->loop_ = std::thread([self] { self->Loop(); });
  server->listener_->Start([self](int fd) { self->Adopt(fd); });
  return server;
}

MetricsServer::~MetricsServer() {
  if (listener_ != nullptr) listener_->Stop();  // No new connections.
  stopping_.store(true);
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  if (loop_.joinable()) loop_.join();
  {
    absl::MutexLock lock(&mu_);
    std::vector<int> open;
    for (const auto& [fd, connection] : connections_) open.push_back(fd);
    for (int fd : open) Close(fd);
  }
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void MetricsServer::Adopt(int fd) {
  absl::MutexLock lock(&mu_);
  if (stopping_.load()) {
    close(fd);
    return;
  }
  connections_[fd].deadline = absl::Now() + kRequestTimeout;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) Close(fd);
}

void MetricsServer::Close(int fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  connections_.erase(fd);
}

void MetricsServer::Loop() {
  std::vector<epoll_event> events(64);
  while (!stopping_.load()) {
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), kSweepMs);
    absl::MutexLock lock(&mu_);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) continue;
      auto it = connections_.find(fd);
      if (it == connections_.end()) continue;
      Connection& connection = it->second;
      bool done = false;
      if (connection.response.empty()) {
        if ((events[i].events & (EPOLLERR | EPOLLHUP)) != 0) {
          Close(fd);
          continue;
        }
        const ReadState state = Read(fd, connection);
        if (state == ReadState::kGone) {
          // A client that closed or broke its side before its request was complete.
          Close(fd);
          continue;
        }
        if (state == ReadState::kMore) continue;
        connection.deadline = absl::Now() + kResponseTimeout;
        epoll_event writable{};
        writable.events = EPOLLOUT;
        writable.data.fd = fd;
        epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &writable);
        done = Write(fd, connection);
      } else if ((events[i].events & (EPOLLERR | EPOLLHUP)) != 0) {
        done = true;
      } else {
        done = Write(fd, connection);
      }
      if (done) Close(fd);
    }
    // Connections past their deadline: slow or idle senders, readers that stopped.
    const absl::Time now = absl::Now();
    std::vector<int> expired;
    for (const auto& [fd, connection] : connections_) {
      if (connection.deadline < now) expired.push_back(fd);
    }
    for (int fd : expired) Close(fd);
  }
}

MetricsServer::ReadState MetricsServer::Read(int fd, Connection& connection) {
  char buffer[2048];
  for (;;) {
    const ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
    if (got > 0) {
      connection.request.append(buffer, static_cast<size_t>(got));
      if (connection.request.size() > kMaxRequestBytes) {
        connection.response = HttpResponse("431 Request Header Fields Too Large", "text/plain",
                                           "request headers too large\n");
        return ReadState::kReady;
      }
      if (absl::StrContains(connection.request, "\r\n\r\n")) {
        connection.response = Respond(connection.request);
        return ReadState::kReady;
      }
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ReadState::kMore;
    return ReadState::kGone;  // End of stream before the request was whole, or an error.
  }
}

bool MetricsServer::Write(int fd, Connection& connection) {
  while (connection.sent < connection.response.size()) {
    const ssize_t put = send(fd, connection.response.data() + connection.sent,
                             connection.response.size() - connection.sent, MSG_NOSIGNAL);
    if (put > 0) {
      connection.sent += static_cast<size_t>(put);
      continue;
    }
    if (put < 0 && errno == EINTR) continue;
    if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    return true;  // The client went away: nothing more to send.
  }
  return true;
}

std::string MetricsServer::Respond(const std::string& request) const {
  // "GET /metrics?x HTTP/1.1": the method, then the path up to a query or the version.
  const size_t line_end = request.find("\r\n");
  const absl::string_view line = absl::string_view(request).substr(0, line_end);
  const size_t space = line.find(' ');
  const absl::string_view method = line.substr(0, space);
  absl::string_view target =
      space == absl::string_view::npos ? absl::string_view() : line.substr(space + 1);
  target = target.substr(0, target.find(' '));
  const absl::string_view path = target.substr(0, target.find('?'));
  if (method != "GET" && method != "HEAD") {
    return HttpResponse("405 Method Not Allowed", "text/plain", "only GET /metrics\n");
  }
  if (path != "/metrics") return HttpResponse("404 Not Found", "text/plain", "try /metrics\n");
  std::ostringstream body;
  prometheus::TextSerializer().Serialize(body, registry_->Collect());
  std::string response =
      HttpResponse("200 OK", "text/plain; version=0.0.4; charset=utf-8", body.str());
  if (method == "HEAD") response.resize(response.find("\r\n\r\n") + 4);
  return response;
}

}  // namespace pdserve
