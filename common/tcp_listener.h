// A TCP listening socket with its own accept thread that never stops accepting: descriptor
// exhaustion (EMFILE, ENFILE) and memory errors are waited out with a backoff instead of
// ending the listener (gRPC 1.51's listener closes for good on the first EMFILE) or spinning
// (an accept retried at once keeps failing), and a connection whose descriptor is at or past
// `refuse_fd_at` (fd_limits.h) is closed at once, so that clients alone cannot exhaust the
// process's descriptors. Each accepted connection (non-blocking, close-on-exec, TCP_NODELAY)
// is handed to the handler, which owns it.
// Thread-safety: Start/Stop from one thread; the handler runs on the accept thread.
#ifndef PDSERVE_COMMON_TCP_LISTENER_H_
#define PDSERVE_COMMON_TCP_LISTENER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pdserve {

struct TcpListenerOptions {
  // host:port (net_address.h); port 0 picks a free port; an empty host, "::" or "0.0.0.0"
  // listens on every interface (the first two on IPv4 and IPv6 alike).
  std::string listen_address;
  // The flag or field that named the address, for error messages.
  std::string field = "listen_address";
  // Connections whose descriptor number is at or past this are closed when accepted; <= 0
  // accepts all.
  int64_t refuse_fd_at = 0;
  // Longest wait after an accept failure; the first wait is 10 ms, doubling.
  absl::Duration max_backoff = absl::Seconds(1);
};

struct TcpListenerStats {
  std::atomic<int64_t> accepted{0};
  // Closed at once: their descriptor was past refuse_fd_at.
  std::atomic<int64_t> refused_fd_headroom{0};
  // accept() failures other than a connection that went away before it was accepted.
  std::atomic<int64_t> accept_errors{0};
};

class TcpListener {
 public:
  using Handler = absl::AnyInvocable<void(int fd)>;

  // Binds and listens; does not accept until Start. SO_REUSEPORT is off (the port is ours
  // alone); an address in use is UNAVAILABLE, naming it and saying so.
  static absl::StatusOr<std::unique_ptr<TcpListener>> Bind(TcpListenerOptions options);
  ~TcpListener();  // Stop()s.

  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  // Starts the accept thread.
  void Start(Handler handler);
  // Stops accepting and closes the listening socket (new connections are refused by the
  // kernel). Returns once the accept thread has exited; idempotent.
  void Stop();

  int port() const { return port_; }
  int fd() const { return listen_fd_; }
  const TcpListenerStats& stats() const { return stats_; }

 private:
  TcpListener() = default;
  void AcceptLoop();
  // Waits on the wake descriptor up to `timeout` (-1: for ever, with the listener); returns
  // false once stopping.
  bool Wait(int timeout_ms, bool with_listener);

  TcpListenerOptions options_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // An eventfd: Stop() wakes the accept thread.
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  Handler handler_;
  std::thread thread_;
  TcpListenerStats stats_;
};

}  // namespace pdserve

#endif  // PDSERVE_COMMON_TCP_LISTENER_H_
