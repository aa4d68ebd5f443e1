#include "common/tcp_listener.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/net_address.h"

namespace pdserve {
namespace {

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(10);

struct Candidate {
  sockaddr_storage address{};
  socklen_t length = 0;
  int family = AF_UNSPEC;
};

// The addresses to try, in order: the wildcard on IPv6 (dual-stack) then IPv4, as gRPC
// listens; otherwise what the host resolves to, IPv4 first.
absl::StatusOr<std::vector<Candidate>> Candidates(const HostPort& hp, absl::string_view field) {
  std::vector<Candidate> out;
  const uint16_t port = htons(static_cast<uint16_t>(hp.port));
  if (hp.host.empty() || hp.host == "::" || hp.host == "0.0.0.0") {
    Candidate v6;
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&v6.address);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    a6->sin6_port = port;
    v6.length = sizeof(sockaddr_in6);
    v6.family = AF_INET6;
    Candidate v4;
    auto* a4 = reinterpret_cast<sockaddr_in*>(&v4.address);
    a4->sin_family = AF_INET;
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    a4->sin_port = port;
    v4.length = sizeof(sockaddr_in);
    v4.family = AF_INET;
    // "0.0.0.0" asked for IPv4: try it first, so that a host without IPv6 never sees the v6 try.
    if (hp.host == "0.0.0.0") return std::vector<Candidate>{v4};
    return std::vector<Candidate>{v6, v4};
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(hp.port);
  if (int rc = getaddrinfo(hp.host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": cannot resolve '", hp.host, "': ", gai_strerror(rc)));
  }
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    Candidate c;
    std::memcpy(&c.address, ai->ai_addr, ai->ai_addrlen);
    c.length = ai->ai_addrlen;
    c.family = ai->ai_family;
    out.push_back(c);
  }
  freeaddrinfo(found);
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    return a.family == AF_INET && b.family != AF_INET;
  });
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", hp.host, "' has no address"));
  }
  return out;
}

int BoundPort(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

// Errors that say the process or the system is short of a resource: wait, then try again.
bool IsResourceExhaustion(int error) {
  return error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM;
}

// Errors about one connection that went away or was refused by the stack: accept the next.
bool IsConnectionError(int error) {
  return error == ECONNABORTED || error == EPROTO || error == EPERM || error == ENETDOWN ||
         error == ENOPROTOOPT || error == EHOSTDOWN || error == ENONET || error == EHOSTUNREACH ||
         error == EOPNOTSUPP || error == ENETUNREACH || error == ETIMEDOUT;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpListener>> TcpListener::Bind(TcpListenerOptions options) {
  auto hp = ParseHostPort(options.listen_address, options.field);
  if (!hp.ok()) return hp.status();
  auto candidates = Candidates(*hp, options.field);
  if (!candidates.ok()) return candidates.status();
  std::unique_ptr<TcpListener> listener(new TcpListener());
  listener->options_ = std::move(options);
  const TcpListenerOptions& o = listener->options_;
  int last_error = 0;
  for (const Candidate& c : *candidates) {
    const int fd = socket(c.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_error = errno;
      continue;
    }
    const int on = 1, off = 0;
    // SO_REUSEADDR lets a restarted process bind over connections in TIME_WAIT; without
    // SO_REUSEPORT a second live process cannot bind the port.
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (c.family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    if (bind(fd, reinterpret_cast<const sockaddr*>(&c.address), c.length) != 0 ||
        listen(fd, SOMAXCONN) != 0) {
      last_error = errno;
      close(fd);
      if (last_error == EADDRINUSE) break;  // Another family would not make the port ours.
      continue;
    }
    listener->listen_fd_ = fd;
    break;
  }
  if (listener->listen_fd_ < 0) {
    if (last_error == EADDRINUSE) {
      return absl::UnavailableError(absl::StrCat(
          o.field, ": ", o.listen_address, " is in use (another process listens on that port)"));
    }
    return absl::UnavailableError(absl::StrCat(o.field, ": cannot listen on ", o.listen_address,
                                               ": ", std::strerror(last_error)));
  }
  listener->port_ = BoundPort(listener->listen_fd_);
  listener->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (listener->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  return listener;
}

TcpListener::~TcpListener() {
  Stop();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void TcpListener::Start(Handler handler) {
  handler_ = std::move(handler);
  thread_ = std::thread([this] { AcceptLoop(); });
}

void TcpListener::Stop() {
  if (stopping_.exchange(true)) return;
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  // Closed here rather than in the destructor: a stopped listener refuses new connections at
  // once instead of letting them queue unanswered in the backlog.
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

bool TcpListener::Wait(int timeout_ms, bool with_listener) {
  pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
  const int n = poll(fds, with_listener ? 2 : 1, timeout_ms);
  (void)n;  // EINTR and timeouts both mean: look again.
  return !stopping_.load();
}

void TcpListener::AcceptLoop() {
  absl::Duration backoff = kFirstBackoff;
  while (Wait(-1, /*with_listener=*/true)) {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        backoff = kFirstBackoff;
        if (options_.refuse_fd_at > 0 && fd >= options_.refuse_fd_at) {
          stats_.refused_fd_headroom.fetch_add(1);  // Before the client can see the close.
          close(fd);
          PDS_LOG_EVERY_N_SEC(WARNING, 5)
              << options_.field << ": refusing connections: " << fd + 1
              << " or more descriptors are open, at or past the " << options_.refuse_fd_at
              << " this listener may use (the rest are kept for the process's own work)";
          continue;
        }
        const int on = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
        stats_.accepted.fetch_add(1);
        handler_(fd);
        continue;
      }
      const int error = errno;
      if (error == EINTR || IsConnectionError(error)) continue;
      if (error == EAGAIN || error == EWOULDBLOCK) break;
      stats_.accept_errors.fetch_add(1);
      PDS_LOG_EVERY_N_SEC(WARNING, 5)
          << options_.field << ": accept failed (" << std::strerror(error) << "); retrying in "
          << absl::FormatDuration(backoff)
          << (IsResourceExhaustion(error) ? " (out of descriptors or memory)" : "");
      // The listener stays readable while connections wait in the backlog: wait on the wake
      // descriptor alone, or this would spin.
      if (!Wait(static_cast<int>(absl::ToInt64Milliseconds(backoff)), /*with_listener=*/false)) {
        return;
      }
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
  }
}

}  // namespace pdserve
