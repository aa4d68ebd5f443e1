// An event-driven HTTP/1.1 server (Boost.Beast on Boost.Asio): a few I/O threads serve every
// connection; no thread per connection. Requests are parsed by Beast with a header and a body
// limit; a request must arrive whole within read_timeout of the connection going idle (slow
// senders and idle keep-alive connections are closed); `Expect: 100-continue` is answered.
// A handler gets each request and an HttpExchange to answer it: one whole response, or a
// stream (headers, then chunks written one at a time, each completion reported so the caller
// can apply backpressure, then the end). While a request is being answered the connection is
// watched, so a client that goes away is reported at once (the caller cancels its work).
// Thread-safety: Start/Stop from one thread. Handlers run on I/O threads and must not block;
// HttpExchange methods may be called from any thread (they post to the connection's strand).
#ifndef PDSERVE_ROUTER_OPENAI_HTTP_SERVER_H_
#define PDSERVE_ROUTER_OPENAI_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pdserve::router::openai {

struct HttpServerConfig {
  // host:port to listen on; port 0 picks a free port. Required.
  std::string listen_address;
  // I/O threads. Default 2.
  int threads = 2;
  // Largest request body; larger ones get 413. Default 32 MiB.
  size_t max_body_bytes = size_t{32} << 20;
  // Largest request line plus headers; larger ones get 431. Default 16 KiB.
  size_t max_header_bytes = size_t{16} << 10;
  // A request must arrive whole within this long of the connection going idle (the client
  // connecting, or the previous response ending); otherwise the connection is closed.
  // Default 30 s.
  absl::Duration read_timeout = absl::Seconds(30);
  // Open connections; beyond it new ones get 503 and are closed. Default 10000.
  int max_connections = 10000;
  // Called with the number of open connections whenever it changes (on an I/O thread).
  std::function<void(int64_t open)> on_open_connections;

  absl::Status Validate() const;
};

struct HttpRequest {
  std::string method;
  std::string target;                                        // Path and query, as sent.
  std::vector<std::pair<std::string, std::string>> headers;  // Names lower-case.
  std::string body;
  std::string peer_address;  // The client's IP address (empty if the socket could not say).

  // The first header named `name` (lower-case), or empty.
  std::string Header(const std::string& name) const;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// One request's answer. Exactly one of Respond or (StartStream, Write..., EndStream) is used.
// After the client disconnects every call does nothing and callbacks get ok == false.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual void Respond(int status, HttpHeaders headers, std::string body) = 0;
  // Sends the status and headers of a chunked response; `done` runs once they are written.
  virtual void StartStream(int status, HttpHeaders headers, std::function<void(bool ok)> done) = 0;
  // Sends one chunk; `done` runs once it is written (write the next one then).
  virtual void Write(std::string data, std::function<void(bool ok)> done) = 0;
  virtual void EndStream() = 0;
  // `on_disconnect` runs once if the client goes away before the answer is complete (on an
  // I/O thread). Set it before starting work that should be cancelled.
  virtual void OnDisconnect(std::function<void()> on_disconnect) = 0;
};

using HttpHandler =
    std::function<void(HttpRequest request, std::shared_ptr<HttpExchange> exchange)>;

// Counters the front exports as metrics.
struct HttpServerStats {
  std::atomic<int64_t> open_connections{0};
  std::atomic<int64_t> refused_connections{0};
  // Closed when accepted: past the descriptors HTTP clients may hold (fd_limits.h).
  std::atomic<int64_t> refused_fd_headroom{0};
  // accept() failures (out of descriptors or memory), each waited out with a backoff.
  std::atomic<int64_t> accept_errors{0};
  std::atomic<int64_t> timed_out_reads{0};
};

class HttpServer {
 public:
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerConfig& config,
                                                           HttpHandler handler);
  ~HttpServer();  // Stop().

  // host:port actually bound.
  const std::string& address() const { return address_; }
  const HttpServerStats& stats() const;

  // Stops accepting; open connections stay until they end.
  void StopAccepting();
  // Closes every connection and joins the I/O threads.
  void Stop();

  struct Impl;  // The Asio context, acceptor and connections (http_server.cc).

 private:
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
  std::string address_;
};

}  // namespace pdserve::router::openai

#endif  // PDSERVE_ROUTER_OPENAI_HTTP_SERVER_H_
