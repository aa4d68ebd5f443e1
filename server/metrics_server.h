// Serves a prometheus-cpp registry over HTTP at /metrics. Every pdserve process owns one
// registry and one MetricsServer; components declare their metric families once, in a
// *Metrics struct built from that registry.
//
// Event-driven (one epoll thread), so that idle or slow clients cannot starve scrapes: a
// thread-per-connection server (civetweb, four threads) was blinded by 16 connections holding
// partial requests. A request must arrive whole within 2 s of its connection opening and the
// answer must be taken within 10 s; the connection is then closed (Prometheus reconnects per
// scrape). Connections come through a TcpListener (tcp_listener.h), so descriptor shortages
// are waited out and the gRPC share of the descriptor budget applies (fd_limits.h).
// Thread-safety: the object is immutable after Start; it serves from its own threads.
#ifndef PDSERVE_SERVER_METRICS_SERVER_H_
#define PDSERVE_SERVER_METRICS_SERVER_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tcp_listener.h"
#include "prometheus/registry.h"

namespace pdserve {

class MetricsServer {
 public:
  // Binds `listen_address` (host:port; port 0 picks a free port) and serves `registry` at
  // /metrics. Also registers pdserve_build_info{version,component} = 1.
  // pdserve_build_info carries `component`, the version and `build_info` (more labels, e.g. a
  // worker's engine backend and instruction set).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listen_address, std::shared_ptr<prometheus::Registry> registry,
      const std::string& component, const std::map<std::string, std::string>& build_info = {});
  ~MetricsServer();

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound address, host:port, with the real port.
  const std::string& address() const { return address_; }
  int port() const { return port_; }

 private:
  struct Connection {
    std::string request;   // Bytes read until the blank line that ends the headers.
    std::string response;  // Once the request is complete.
    size_t sent = 0;
    absl::Time deadline;
  };

  MetricsServer() = default;
  void Adopt(int fd);
  void Loop();
  enum class ReadState { kMore, kReady, kGone };
  // Reads what `fd` sent: kReady once the response is ready to send, kMore to wait for more,
  // kGone when the client closed or failed before its request was whole.
  ReadState Read(int fd, Connection& connection);
  // Writes what it can; true once everything was sent.
  bool Write(int fd, Connection& connection);
  std::string Respond(const std::string& request) const;
  void Close(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<TcpListener> listener_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread loop_;
  absl::Mutex mu_;
  absl::flat_hash_map<int, Connection> connections_ ABSL_GUARDED_BY(mu_);
  std::string address_;
  int port_ = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVER_METRICS_SERVER_H_
