// A raw HTTP/1.1 client connection with control over the bytes and their timing (benchmarks
// timing server-sent events; tests sending slowly, pipelining, disconnecting mid-stream), and a
// parser for what comes back (chunked bodies decoded). Every wait is bounded. RAII: the socket
// closes with the object.
// Thread-safety: one thread per connection.
#ifndef PDSERVE_TOOLS_CLIENT_HTTP_CONNECTION_H_
#define PDSERVE_TOOLS_CLIENT_HTTP_CONNECTION_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace pdserve::client {

struct HttpResponseParts {
  int status = 0;
  std::map<std::string, std::string> headers;  // Names lower-case.
  std::string body;                            // De-chunked.
  bool complete = false;                       // The whole body arrived.
};

// Parses the first response in `raw` (status line, headers, Content-Length or chunked body).
HttpResponseParts ParseHttpResponse(const std::string& raw);

class HttpConnection {
 public:
  // Connects to host:port.
  static absl::StatusOr<std::unique_ptr<HttpConnection>> Open(const std::string& address);
  ~HttpConnection();

  absl::Status Send(absl::string_view bytes);
  // Reads until `done(received so far)` holds, the peer closes, or `timeout`; returns all
  // bytes received on this connection so far.
  const std::string& ReadUntil(const std::function<bool(const std::string&)>& done,
                               absl::Duration timeout);
  // Reads until one whole response is in; its parts.
  HttpResponseParts ReadResponse(absl::Duration timeout = absl::Seconds(30));
  // Whether the peer closed the connection within `timeout` (bytes that arrive meanwhile are
  // kept).
  bool WaitClosed(absl::Duration timeout);
  // Reads whatever has arrived, without waiting.
  void ReadAvailable();
  int fd() const { return fd_; }
  bool peer_closed() const { return peer_closed_; }
  void Close();
  const std::string& received() const { return received_; }
  // Forgets what was received (before reading a second response).
  void ClearReceived() { received_.clear(); }

 private:
  explicit HttpConnection(int fd) : fd_(fd) {}
  // One read with a timeout; false on timeout.
  bool ReadSome(absl::Duration timeout);

  int fd_;
  bool peer_closed_ = false;
  std::string received_;
};

// One request on a fresh connection ("Connection: close"), its response.
absl::StatusOr<HttpResponseParts> HttpCall(const std::string& address, const std::string& method,
                                           const std::string& path, const std::string& body,
                                           const std::string& extra_headers = "",
                                           absl::Duration timeout = absl::Seconds(60));

// A request's bytes: method, path, JSON body, extra header lines (each ending in \r\n).
std::string HttpRequestBytes(const std::string& method, const std::string& path,
                             const std::string& body, const std::string& extra_headers = "",
                             bool keep_alive = true);

}  // namespace pdserve::client

#endif  // PDSERVE_TOOLS_CLIENT_HTTP_CONNECTION_H_
