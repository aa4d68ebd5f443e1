#include "router/openai/http_server.h"

#include <algorithm>
#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/fd_limits.h"
#include "common/logging.h"
#include "common/net_address.h"

namespace pdserve::router::openai {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

// A chunk longer than the header limit is not read into the buffer while watching a
// connection for disconnects: pipelined bytes beyond it wait in the kernel.
constexpr size_t kWatchReadBytes = 4096;
// Waits after an accept failure: the first, then doubling to the last.
constexpr absl::Duration kFirstAcceptBackoff = absl::Milliseconds(10);
constexpr absl::Duration kMaxAcceptBackoff = absl::Seconds(1);
// Lingering close after a refused request: at most this long, at most this many bytes.
constexpr absl::Duration kLingerTime = absl::Seconds(2);
constexpr size_t kLingerBytes = size_t{256} << 20;
// How long a response write may wait for the client to take it before the connection is
// dropped (a client that stopped reading).
constexpr auto kWriteTimeout = std::chrono::seconds(60);

std::string StatusLine(int status) {
  return absl::StrCat("HTTP/1.1 ", status, " ",
                      std::string(http::obsolete_reason(static_cast<http::status>(status))),
                      "\r\n");
}

std::string ErrorJson(absl::string_view message, absl::string_view type) {
  // Fixed messages only (no client data), so no escaping is needed.
  return absl::StrCat(R"({"error": {"message": ")", message, R"(", "type": ")", type,
                      R"(", "param": null, "code": null}})");
}

}  // namespace

absl::Status HttpServerConfig::Validate() const {
  if (listen_address.empty()) return absl::InvalidArgumentError("--http_listen: required");
  if (threads < 1 || threads > 64)
    return absl::InvalidArgumentError("--http_threads: must be in [1, 64]");
  if (max_body_bytes < 1024)
    return absl::InvalidArgumentError("--http_max_body_bytes: must be >= 1024");
  if (read_timeout < absl::Milliseconds(100))
    return absl::InvalidArgumentError("--http_read_timeout: must be >= 100ms");
  if (max_connections < 1)
    return absl::InvalidArgumentError("--http_max_connections: must be >= 1");
  return absl::OkStatus();
}

std::string HttpRequest::Header(const std::string& name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return "";
}

class Session;

struct HttpServer::Impl {
  // Declared before the io_context: destroying it destroys handlers still queued, and the
  // sessions they hold update these.
  HttpServerConfig config;
  HttpHandler handler;
  HttpServerStats stats;
  absl::Mutex mu;
  absl::flat_hash_map<Session*, std::weak_ptr<Session>> sessions ABSL_GUARDED_BY(mu);
  bool accepting ABSL_GUARDED_BY(mu) = true;
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  tcp::acceptor acceptor{ioc};
  // Waits out an accept failure: retried at once, EMFILE would spin a core for as long as the
  // descriptors stay short.
  net::steady_timer accept_backoff{ioc};
  absl::Duration backoff = kFirstAcceptBackoff;
  // Connections whose descriptor is numbered at or past this are closed when accepted.
  int64_t refuse_fd_at = 0;
  // config.max_connections, clamped to the descriptors HTTP clients may hold.
  int64_t max_connections = 0;
  std::vector<std::thread> threads;

  void Accept();
  void AcceptLater();
};

// One connection. Everything below runs on the connection's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer::Impl* impl, tcp::socket socket)
      : impl_(impl),
        socket_(std::move(socket)),
        read_timer_(socket_.get_executor()),
        write_timer_(socket_.get_executor()) {}

  void Start(bool refuse) {
    counted_ = true;
    const int64_t open = impl_->stats.open_connections.fetch_add(1) + 1;
    if (impl_->config.on_open_connections) impl_->config.on_open_connections(open);
    {
      absl::MutexLock lock(&impl_->mu);
      impl_->sessions[this] = weak_from_this();
    }
    if (refuse) {
      impl_->stats.refused_connections.fetch_add(1);
      keep_alive_ = false;
      Send(StatusLine(503) + "Content-Type: application/json\r\nConnection: close\r\n" +
               ContentLength(ErrorJson("too many connections", "service_unavailable")),
           nullptr, /*last=*/true);
      return;
    }
    ReadRequest();
  }

  ~Session() {
    if (!counted_) return;
    const int64_t open = impl_->stats.open_connections.fetch_sub(1) - 1;
    if (impl_->config.on_open_connections) impl_->config.on_open_connections(open);
  }

  auto executor() { return socket_.get_executor(); }

  // The exchange API, on the strand.
  void Respond(uint64_t exchange, int status, const HttpHeaders& headers, const std::string& body) {
    if (closed_ || exchange != exchange_id_ || answered_) return;
    answered_ = true;
    Send(StatusLine(status) + Headers(headers) + ContentLength(body), nullptr, /*last=*/true);
  }
  void StartStream(uint64_t exchange, int status, const HttpHeaders& headers,
                   std::function<void(bool)> done) {
    if (closed_ || exchange != exchange_id_ || answered_) {
      if (done) done(false);
      return;
    }
    answered_ = true;
    streaming_ = true;
    std::string head = StatusLine(status) + Headers(headers);
    if (chunked_) head += "Transfer-Encoding: chunked\r\n";
    Send(head + "\r\n", std::move(done), false);
  }
  void Write(uint64_t exchange, const std::string& data, std::function<void(bool)> done) {
    if (closed_ || exchange != exchange_id_ || !streaming_) {
      if (done) done(false);
      return;
    }
    if (data.empty()) {  // An empty chunk would end the stream.
      if (done) done(true);
      return;
    }
    Send(chunked_ ? absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n") : data,
         std::move(done), false);
  }
  void EndStream(uint64_t exchange) {
    if (closed_ || exchange != exchange_id_ || !streaming_) return;
    streaming_ = false;
    Send(chunked_ ? "0\r\n\r\n" : "", nullptr, /*last=*/true);
  }
  void SetOnDisconnect(uint64_t exchange, std::function<void()> callback) {
    if (exchange != exchange_id_ || answer_completed_) return;
    if (closed_) {  // Gone before the caller asked to hear of it.
      callback();
      return;
    }
    on_disconnect_ = std::move(callback);
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    read_timer_.cancel();
    write_timer_.cancel();
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    {
      absl::MutexLock lock(&impl_->mu);
      impl_->sessions.erase(this);
    }
    // Writes that will never happen; the client's request, if one was being answered, is gone.
    std::deque<Output> pending;
    pending.swap(writes_);
    for (Output& out : pending) {
      if (out.done) out.done(false);
    }
    FireDisconnect();
  }

 private:
  struct Output {
    std::string bytes;
    std::function<void(bool)> done;
    bool last = false;
  };

  std::string Headers(const HttpHeaders& headers) const {
    std::string out;
    for (const auto& [name, value] : headers) absl::StrAppend(&out, name, ": ", value, "\r\n");
    if (!keep_alive_) out += "Connection: close\r\n";
    return out;
  }
  static std::string ContentLength(const std::string& body) {
    return absl::StrCat("Content-Length: ", body.size(), "\r\n\r\n", body);
  }

  void FireDisconnect() {
    if (exchange_done_) return;
    exchange_done_ = true;
    if (auto callback = std::move(on_disconnect_)) callback();
  }

  // After an answer that refused the request, reads and drops what the client still sends,
  // until it closes, kLingerBytes were dropped or kLingerTime passed (nginx's lingering
  // close), so that the client reads our answer instead of a connection reset.
  void LingerThenClose() {
    read_timer_.expires_after(std::chrono::microseconds(absl::ToInt64Microseconds(kLingerTime)));
    read_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->closed_) return;
      self->Close();
    });
    DropInput();
  }

  void DropInput() {
    if (closed_) return;
    if (!linger_buffer_) linger_buffer_ = std::make_unique<std::array<char, 16384>>();
    socket_.async_read_some(net::buffer(*linger_buffer_),
                            [self = shared_from_this()](beast::error_code ec, size_t bytes) {
                              self->lingered_bytes_ += bytes;
                              if (ec || self->lingered_bytes_ > kLingerBytes) {
                                self->Close();
                                return;
                              }
                              self->DropInput();
                            });
  }

  void ArmReadTimer() {
    read_timer_.expires_after(
        std::chrono::microseconds(absl::ToInt64Microseconds(impl_->config.read_timeout)));
    read_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->closed_) return;
      self->impl_->stats.timed_out_reads.fetch_add(1);
      self->Close();
    });
  }

  void ReadRequest() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(impl_->config.max_header_bytes));
    parser_->body_limit(impl_->config.max_body_bytes);
    ArmReadTimer();
    http::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  // Parse errors are answered (when the socket still works) and end the connection.
  bool HandleReadError(beast::error_code ec) {
    if (!ec) return false;
    if (closed_) return true;
    keep_alive_ = false;
    exchange_done_ = true;
    read_timer_.cancel();
    if (ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted) {
      Close();
    } else if (ec == http::error::body_limit) {
      RespondAndClose(413, absl::StrCat("request body larger than ", impl_->config.max_body_bytes,
                                        " bytes (--http_max_body_bytes)"));
    } else if (ec == http::error::header_limit) {
      RespondAndClose(431, absl::StrCat("request headers larger than ",
                                        impl_->config.max_header_bytes, " bytes"));
    } else {
      RespondAndClose(400, "malformed HTTP request");
    }
    return true;
  }

  void RespondAndClose(int status, const std::string& message) {
    answered_ = true;
    // The client may still be sending what we refused (a 40 MB body): closing at once would
    // answer its bytes with a reset, which discards our answer before it can read it.
    linger_ = true;
    Send(StatusLine(status) + "Content-Type: application/json\r\nConnection: close\r\n" +
             ContentLength(ErrorJson(message, "invalid_request_error")),
         nullptr, /*last=*/true);
  }

  void OnHeader(beast::error_code ec) {
    if (HandleReadError(ec)) return;
    const auto& header = parser_->get();
    if (beast::iequals(header[http::field::expect], "100-continue")) {
      // curl and others wait for this before sending a body.
      Send(
          "HTTP/1.1 100 Continue\r\n\r\n",
          [self = shared_from_this()](bool ok) {
            if (ok) self->ReadBody();
          },
          /*last=*/false);
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRequest(ec); });
  }

  void OnRequest(beast::error_code ec) {
    if (HandleReadError(ec)) return;
    read_timer_.cancel();
    http::request<http::string_body> message = parser_->release();
    parser_.reset();
    keep_alive_ = message.keep_alive();
    chunked_ = message.version() >= 11;
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0 streams end by closing.
    HttpRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    for (const auto& field : message) {
      request.headers.emplace_back(absl::AsciiStrToLower(std::string(field.name_string())),
                                   std::string(field.value()));
    }
    request.body = std::move(message.body());
    beast::error_code remote_error;
    const auto remote = socket_.remote_endpoint(remote_error);
    if (!remote_error) request.peer_address = remote.address().to_string();
    ++exchange_id_;
    answered_ = false;
    answer_completed_ = false;
    streaming_ = false;
    exchange_done_ = false;
    on_disconnect_ = nullptr;
    Watch();
    impl_->handler(std::move(request), MakeExchange());
  }

  std::shared_ptr<HttpExchange> MakeExchange();

  // While a request is answered, a read stays pending so that a client that disconnects is
  // seen at once; bytes it sends meanwhile (a pipelined request) are kept for the next parse.
  void Watch() {
    if (watching_ || closed_ || buffer_.size() >= impl_->config.max_header_bytes) return;
    watching_ = true;
    socket_.async_read_some(
        buffer_.prepare(kWatchReadBytes),
        [self = shared_from_this()](beast::error_code ec, size_t n) { self->OnWatch(ec, n); });
  }

  void OnWatch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (!ec) buffer_.commit(n);
    if (closed_) return;
    if (read_after_watch_) {  // The answer ended and cancelled this read to read the next request.
      read_after_watch_ = false;
      if (!ec || ec == net::error::operation_aborted) {
        ReadRequest();
      } else {
        Close();
      }
      return;
    }
    if (ec) {
      // EOF or reset: the client is gone.
      Close();
      return;
    }
    if (!exchange_done_) Watch();
  }

  void Send(std::string bytes, std::function<void(bool)> done, bool last) {
    if (closed_) {
      if (done) done(false);
      return;
    }
    writes_.push_back(Output{std::move(bytes), std::move(done), last});
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (writes_.empty() || closed_) return;
    writing_ = true;
    write_timer_.expires_after(kWriteTimeout);
    write_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec && !self->closed_) self->Close();  // The client stopped reading.
    });
    net::async_write(
        socket_, net::buffer(writes_.front().bytes),
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWritten(ec); });
  }

  void OnWritten(beast::error_code ec) {
    writing_ = false;
    write_timer_.cancel();
    if (closed_ || writes_.empty()) return;
    Output out = std::move(writes_.front());
    writes_.pop_front();
    if (ec) {
      if (out.done) out.done(false);
      Close();
      return;
    }
    if (out.done) out.done(true);
    if (out.last) {
      AnswerComplete();
      return;
    }
    if (!writes_.empty()) WriteNext();
  }

  void AnswerComplete() {
    exchange_done_ = true;
    answer_completed_ = true;
    on_disconnect_ = nullptr;
    bool stopping;
    {
      absl::MutexLock lock(&impl_->mu);
      stopping = !impl_->accepting;
    }
    if (!keep_alive_ || stopping) {
      beast::error_code ignored;
      socket_.shutdown(tcp::socket::shutdown_send, ignored);
      if (linger_ && !stopping) {
        LingerThenClose();
        return;
      }
      Close();
      return;
    }
    if (watching_) {
      read_after_watch_ = true;
      beast::error_code ignored;
      socket_.cancel(ignored);  // No write is pending: only the watch read is cancelled.
      return;
    }
    ReadRequest();
  }

  HttpServer::Impl* impl_;
  tcp::socket socket_;
  net::steady_timer read_timer_;
  net::steady_timer write_timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<Output> writes_;
  bool writing_ = false;
  bool watching_ = false;
  bool read_after_watch_ = false;
  bool closed_ = false;
  bool counted_ = false;  // In open_connections (Start ran).
  bool keep_alive_ = true;
  bool chunked_ = true;
  // The request being answered.
  uint64_t exchange_id_ = 0;
  bool answered_ = false;
  // Refused without reading the whole request: drain before closing (LingerThenClose).
  bool linger_ = false;
  size_t lingered_bytes_ = 0;
  std::unique_ptr<std::array<char, 16384>> linger_buffer_;
  bool answer_completed_ = false;
  bool streaming_ = false;
  bool exchange_done_ = true;
  std::function<void()> on_disconnect_;
};

// Posts every call to the session's strand; a session that is gone ignores them.
class SessionExchange final : public HttpExchange {
 public:
  SessionExchange(std::weak_ptr<Session> session, uint64_t id, net::any_io_executor strand)
      : session_(std::move(session)), id_(id), strand_(std::move(strand)) {}

  void Respond(int status, HttpHeaders headers, std::string body) override {
    Post([id = id_, status, headers = std::move(headers), body = std::move(body)](Session& s) {
      s.Respond(id, status, headers, body);
    });
  }
  void StartStream(int status, HttpHeaders headers, std::function<void(bool ok)> done) override {
    Post([id = id_, status, headers = std::move(headers),
          done](Session& s) mutable { s.StartStream(id, status, headers, std::move(done)); },
         done);
  }
  void Write(std::string data, std::function<void(bool ok)> done) override {
    Post([id = id_, data = std::move(data),
          done](Session& s) mutable { s.Write(id, data, std::move(done)); },
         done);
  }
  void EndStream() override {
    Post([id = id_](Session& s) { s.EndStream(id); });
  }
  void OnDisconnect(std::function<void()> on_disconnect) override {
    Post([id = id_,
          on_disconnect](Session& s) mutable { s.SetOnDisconnect(id, std::move(on_disconnect)); },
         [on_disconnect](bool) { on_disconnect(); });
  }

 private:
  // `fail` runs when the session is already gone (its callback must still be answered).
  template <typename Fn>
  void Post(Fn fn, std::function<void(bool)> fail = nullptr) {
    std::shared_ptr<Session> session = session_.lock();
    if (session == nullptr) {
      if (fail) fail(false);
      return;
    }
    net::post(strand_, [session, fn = std::move(fn)]() mutable { fn(*session); });
  }

  std::weak_ptr<Session> session_;
  const uint64_t id_;
  net::any_io_executor strand_;  // The connection's strand.
};

std::shared_ptr<HttpExchange> Session::MakeExchange() {
  return std::make_shared<SessionExchange>(weak_from_this(), exchange_id_, socket_.get_executor());
}

void HttpServer::Impl::Accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted) return;  // Closed by StopAccepting.
      // A connection that went away before it was accepted is not our shortage.
      if (ec != net::error::connection_aborted) {
        stats.accept_errors.fetch_add(1);
        PDS_LOG_EVERY_N_SEC(WARNING, 5) << "HTTP accept failed: " << ec.message()
                                        << "; retrying in " << absl::FormatDuration(backoff);
        AcceptLater();
        return;
      }
    } else if (socket.native_handle() >= refuse_fd_at) {
      // Past the descriptors HTTP may hold: closed without a word (writing a 503 would need
      // the strand and a buffer for a client that is likely part of a flood).
      stats.refused_fd_headroom.fetch_add(1);
      PDS_LOG_EVERY_N_SEC(WARNING, 5)
          << "HTTP: refusing connections: " << socket.native_handle() + 1
          << " or more descriptors are open, at or past the " << refuse_fd_at
          << " HTTP clients may use (the rest are kept for gRPC and the router's own work)";
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      backoff = kFirstAcceptBackoff;
      const bool refuse = stats.open_connections.load() >= max_connections;
      auto session = std::make_shared<Session>(this, std::move(socket));
      net::post(session->executor(), [session, refuse] { session->Start(refuse); });
    }
    {
      absl::MutexLock lock(&mu);
      if (!accepting) return;
    }
    Accept();
  });
}

void HttpServer::Impl::AcceptLater() {
  accept_backoff.expires_after(absl::ToChronoNanoseconds(backoff));
  backoff = std::min(backoff * 2, kMaxAcceptBackoff);
  accept_backoff.async_wait([this](beast::error_code ec) {
    if (ec == net::error::operation_aborted) return;
    {
      absl::MutexLock lock(&mu);
      if (!accepting) return;
    }
    Accept();
  });
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerConfig& config,
                                                              HttpHandler handler) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  auto address = ParseHostPort(config.listen_address, "--http_listen");
  if (!address.ok()) return address.status();
  auto server = std::unique_ptr<HttpServer>(new HttpServer());
  server->impl_ = std::make_unique<Impl>();
  Impl& impl = *server->impl_;
  impl.config = config;
  impl.handler = std::move(handler);
  beast::error_code ec;
  const net::ip::address ip =
      net::ip::make_address(address->host.empty() ? "0.0.0.0" : address->host, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_listen: '", address->host, "' is not an IP address"));
  }
  const tcp::endpoint endpoint(ip, static_cast<uint16_t>(address->port));
  impl.acceptor.open(endpoint.protocol(), ec);
  // Like the gRPC listeners (SO_REUSEPORT off), the port is ours alone; SO_REUSEADDR only lets
  // a restarted router bind over connections in TIME_WAIT.
  if (!ec) impl.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl.acceptor.bind(endpoint, ec);
  if (!ec) impl.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("--http_listen: cannot listen on ",
                                               config.listen_address, ": ", ec.message()));
  }
  const tcp::endpoint bound = impl.acceptor.local_endpoint();
  server->address_ = WithPort(*address, bound.port());
  // HTTP clients may hold the descriptors up to the HTTP threshold; the rest stay for gRPC
  // (health probes, workers' reports) and the router's own channels and files.
  const FdBudget budget = FdBudget::ForLimit(CurrentFileLimit());
  impl.refuse_fd_at = budget.http_refuse_at();
  impl.max_connections = std::min<int64_t>(config.max_connections, budget.http_refuse_at());
  if (impl.max_connections < config.max_connections) {
    PDS_LOG(WARNING) << "--http_max_connections=" << config.max_connections << " lowered to "
                     << impl.max_connections << ": the open-file limit is " << budget.limit
                     << " and " << budget.limit - budget.http_refuse_at()
                     << " descriptors are kept for gRPC and the router's own work";
  }
  impl.work.emplace(net::make_work_guard(impl.ioc));
  impl.Accept();
  for (int i = 0; i < config.threads; ++i) {
    impl.threads.emplace_back([&impl] { impl.ioc.run(); });
  }
  return server;
}

const HttpServerStats& HttpServer::stats() const { return impl_->stats; }

void HttpServer::StopAccepting() {
  if (impl_ == nullptr) return;
  {
    absl::MutexLock lock(&impl_->mu);
    if (!impl_->accepting) return;
    impl_->accepting = false;
  }
  net::post(impl_->ioc, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_backoff.cancel();
  });
}

void HttpServer::Stop() {
  if (impl_ == nullptr || impl_->threads.empty()) return;
  StopAccepting();
  std::vector<std::shared_ptr<Session>> open;
  {
    absl::MutexLock lock(&impl_->mu);
    for (auto& [ptr, weak] : impl_->sessions) {
      if (auto s = weak.lock()) open.push_back(std::move(s));
    }
  }
  for (auto& s : open) net::post(s->executor(), [s] { s->Close(); });
  open.clear();
  impl_->work.reset();
  // Closing the sessions leaves nothing pending; run() returns once their handlers ran.
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

HttpServer::~HttpServer() { Stop(); }

}  // namespace pdserve::router::openai
