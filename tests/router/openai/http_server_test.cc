// The HTTP server on its own (a test handler, raw sockets as clients): whole and streamed
// answers, keep-alive and pipelining, every limit (body, headers, slow senders, connections),
// 100-continue, disconnects reported to the answering side, and shutdown with open
// connections.
#include "router/openai/http_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "tests/testing/poll.h"
#include "tools/client/http_connection.h"

namespace pdserve::router::openai {
namespace {

using pdserve::client::HttpConnection;
using pdserve::client::HttpRequestBytes;
using pdserve::client::HttpResponseParts;
using ::testing::HasSubstr;

HttpServerConfig Config() {
  HttpServerConfig config;
  config.listen_address = "127.0.0.1:0";
  config.threads = 2;
  return config;
}

std::unique_ptr<HttpServer> StartServer(HttpServerConfig config, HttpHandler handler) {
  auto server = HttpServer::Start(config, std::move(handler));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// Answers every request with its method, path and body.
void Echo(HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
  exchange->Respond(200, {{"Content-Type", "text/plain"}},
                    absl::StrCat(request.method, " ", request.target, " ", request.body));
}

// Streams `parts` one at a time: each Write waits for the previous one's completion.
void StreamParts(std::shared_ptr<HttpExchange> exchange, std::vector<std::string> parts,
                 size_t i = 0) {
  if (i == parts.size()) {
    exchange->EndStream();
    return;
  }
  std::string part = parts[i];
  exchange->Write(part, [exchange, parts, i](bool ok) {
    if (ok) StreamParts(exchange, parts, i + 1);
  });
}

// Keeps the last request's exchange unanswered, for tests that answer later or never.
class HeldExchange {
 public:
  HttpHandler Handler() {
    return [this](HttpRequest, std::shared_ptr<HttpExchange> exchange) {
      absl::MutexLock lock(&mu_);
      held_ = std::move(exchange);
    };
  }
  // Waits for a request and takes its exchange (null after `timeout`).
  std::shared_ptr<HttpExchange> Take(absl::Duration timeout = absl::Seconds(5)) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(
        absl::Condition(
            +[](std::shared_ptr<HttpExchange>* h) { return *h != nullptr; }, &held_),
        timeout);
    return std::move(held_);
  }

 private:
  absl::Mutex mu_;
  std::shared_ptr<HttpExchange> held_ ABSL_GUARDED_BY(mu_);
};

TEST(HttpServerTest, WholeAnswersKeepAliveAndPipelinedRequests) {
  auto server = StartServer(Config(), Echo);
  ASSERT_NE(server, nullptr);
  auto c = HttpConnection::Open(server->address());
  ASSERT_TRUE(c.ok());
  // Two requests in one write: both are answered, in order, on the same connection.
  ASSERT_TRUE(
      (*c)->Send(HttpRequestBytes("POST", "/a", "one") + HttpRequestBytes("GET", "/b?q=1", ""))
          .ok());
  (*c)->ReadUntil([](const std::string& r) { return r.find("GET /b?q=1") != std::string::npos; },
                  absl::Seconds(10));
  const std::string& raw = (*c)->received();
  const HttpResponseParts first = pdserve::client::ParseHttpResponse(raw);
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, "POST /a one");
  EXPECT_THAT(raw, HasSubstr("GET /b?q=1 "));
  EXPECT_FALSE((*c)->peer_closed());
  // A third request later on the same connection.
  (*c)->ClearReceived();
  ASSERT_TRUE((*c)->Send(HttpRequestBytes("POST", "/c", "three")).ok());
  EXPECT_EQ((*c)->ReadResponse().body, "POST /c three");
}

TEST(HttpServerTest, StreamsAreChunkedAndWrittenOneAtATime) {
  auto server = StartServer(Config(), [](HttpRequest, std::shared_ptr<HttpExchange> exchange) {
    exchange->StartStream(200, {{"Content-Type", "text/event-stream"}}, nullptr);
    StreamParts(exchange, {"data: 1\n\n", "", "data: 2\n\n", std::string(100000, 'x')});
  });
  ASSERT_NE(server, nullptr);
  auto response = pdserve::client::HttpCall(server->address(), "POST", "/s", "{}");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->headers["transfer-encoding"], "chunked");
  EXPECT_EQ(response->headers["content-type"], "text/event-stream");
  EXPECT_EQ(response->body, "data: 1\n\ndata: 2\n\n" + std::string(100000, 'x'));
}

TEST(HttpServerTest, LimitsAreAnsweredWithTheirStatusAndTheConnectionCloses) {
  HttpServerConfig config = Config();
  config.max_body_bytes = 1024;
  config.max_header_bytes = 4096;
  auto server = StartServer(config, Echo);
  ASSERT_NE(server, nullptr);
  struct Case {
    std::string bytes;
    int status;
    const char* message;
  };
  const Case cases[] = {
      {HttpRequestBytes("POST", "/big", std::string(5000, 'b')), 413, "larger than 1024 bytes"},
      {absl::StrCat("GET / HTTP/1.1\r\nX-Big: ", std::string(8000, 'h'), "\r\n\r\n"), 431,
       "headers larger than 4096"},
      {"NOT HTTP AT ALL\r\n\r\n", 400, "malformed HTTP request"},
      {"POST / HTTP/1.1\r\nContent-Length: nope\r\n\r\n", 400, "malformed"},
  };
  for (const Case& c : cases) {
    auto conn = HttpConnection::Open(server->address());
    ASSERT_TRUE(conn.ok());
    ASSERT_TRUE((*conn)->Send(c.bytes).ok());
    const HttpResponseParts response = (*conn)->ReadResponse(absl::Seconds(10));
    EXPECT_EQ(response.status, c.status) << c.message;
    EXPECT_THAT(response.body, HasSubstr(c.message));
    EXPECT_EQ(response.headers.at("connection"), "close");
    EXPECT_TRUE((*conn)->WaitClosed(absl::Seconds(5))) << c.message;
  }
  // The server still answers.
  auto ok = pdserve::client::HttpCall(server->address(), "POST", "/after", "small");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->body, "POST /after small");
}

// A 40 MB body refused from its Content-Length once ended in a connection reset while the
// client was still sending it, so it never read the 413: the server closed with the body still
// arriving. It now drains what the client sends (up to 2 s, 256 MiB) after answering.
TEST(HttpServerTest, AClientStillSendingARefusedBodyReadsThe413) {
  HttpServerConfig config = Config();
  config.max_body_bytes = 1024;
  auto server = StartServer(config, Echo);
  ASSERT_NE(server, nullptr);
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto conn = HttpConnection::Open(server->address());
    ASSERT_TRUE(conn.ok());
    // As most clients do (curl, Python's requests): the whole request first, then the answer.
    const absl::Status sent =
        (*conn)->Send(HttpRequestBytes("POST", "/big", std::string(40 << 20, 'b')));
    EXPECT_TRUE(sent.ok()) << "attempt " << attempt << ": " << sent;
    const HttpResponseParts response = (*conn)->ReadResponse(absl::Seconds(20));
    EXPECT_EQ(response.status, 413) << "attempt " << attempt;
    EXPECT_THAT(response.body, HasSubstr("larger than 1024 bytes"));
  }
}

TEST(HttpServerTest, SlowAndIdleConnectionsAreClosedAfterTheReadTimeout) {
  HttpServerConfig config = Config();
  config.read_timeout = absl::Milliseconds(500);
  auto server = StartServer(config, Echo);
  ASSERT_NE(server, nullptr);
  // Slowloris: headers a byte at a time, never finished.
  auto slow = HttpConnection::Open(server->address());
  ASSERT_TRUE(slow.ok());
  const absl::Time start = absl::Now();
  const std::string head = "POST /slow HTTP/1.1\r\nHost: x\r\n";
  bool closed = false;
  for (char ch : head) {
    if (!(*slow)->Send(std::string(1, ch)).ok() || (*slow)->WaitClosed(absl::Milliseconds(100))) {
      closed = true;
      break;
    }
  }
  closed = closed || (*slow)->WaitClosed(absl::Seconds(5));
  EXPECT_TRUE(closed);
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  // An idle connection goes too; a connection that keeps its requests coming stays.
  auto idle = HttpConnection::Open(server->address());
  ASSERT_TRUE(idle.ok());
  EXPECT_TRUE((*idle)->WaitClosed(absl::Seconds(5)));
  EXPECT_GE(server->stats().timed_out_reads.load(), 2);
  EXPECT_TRUE(pdserve::testing::PollUntil(
      [&] { return server->stats().open_connections.load() == 0; }, absl::Seconds(5)));
}

TEST(HttpServerTest, ExpectContinueIsAnsweredBeforeTheBody) {
  auto server = StartServer(Config(), Echo);
  ASSERT_NE(server, nullptr);
  auto c = HttpConnection::Open(server->address());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(
      (*c)->Send("POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
          .ok());
  (*c)->ReadUntil(
      [](const std::string& r) { return r.find("100 Continue\r\n\r\n") != std::string::npos; },
      absl::Seconds(5));
  ASSERT_THAT((*c)->received(), HasSubstr("HTTP/1.1 100 Continue"));
  ASSERT_TRUE((*c)->Send("body").ok());
  EXPECT_EQ((*c)->ReadResponse().body, "POST /e body");
}

TEST(HttpServerTest, AClientThatLeavesIsReportedAndLaterCallsAreHarmless) {
  HeldExchange held;
  auto server = StartServer(Config(), held.Handler());
  ASSERT_NE(server, nullptr);
  // Asking to hear of a disconnect before it happens, and only after it happened: both told.
  for (bool ask_after_leaving : {false, true}) {
    auto c = HttpConnection::Open(server->address());
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->Send(HttpRequestBytes("POST", "/wait", "{}")).ok());
    std::shared_ptr<HttpExchange> exchange = held.Take();
    ASSERT_NE(exchange, nullptr);
    auto disconnected = std::make_shared<absl::Notification>();
    if (!ask_after_leaving) exchange->OnDisconnect([disconnected] { disconnected->Notify(); });
    (*c)->Close();  // Gone before any answer.
    if (ask_after_leaving) {
      ASSERT_TRUE(pdserve::testing::PollUntil(
          [&] { return server->stats().open_connections.load() == 0; }, absl::Seconds(5)));
      exchange->OnDisconnect([disconnected] { disconnected->Notify(); });
    }
    EXPECT_TRUE(disconnected->WaitForNotificationWithTimeout(absl::Seconds(5)))
        << "asked after leaving: " << ask_after_leaving;
    // Answering a departed client does nothing; a write's callback says it failed.
    auto write_failed = std::make_shared<absl::Notification>();
    exchange->StartStream(200, {}, nullptr);
    exchange->Write("x", [write_failed](bool ok) {
      if (!ok) write_failed->Notify();
    });
    exchange->Respond(200, {}, "late");
    EXPECT_TRUE(write_failed->WaitForNotificationWithTimeout(absl::Seconds(5)));
  }
}

TEST(HttpServerTest, ConnectionsBeyondTheLimitGet503) {
  HttpServerConfig config = Config();
  config.max_connections = 2;
  auto server = StartServer(config, Echo);
  ASSERT_NE(server, nullptr);
  auto a = HttpConnection::Open(server->address());
  auto b = HttpConnection::Open(server->address());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(pdserve::testing::PollUntil(
      [&] { return server->stats().open_connections.load() == 2; }, absl::Seconds(5)));
  auto c = HttpConnection::Open(server->address());
  ASSERT_TRUE(c.ok());
  const HttpResponseParts refused = (*c)->ReadResponse(absl::Seconds(5));
  EXPECT_EQ(refused.status, 503);
  EXPECT_THAT(refused.body, HasSubstr("too many connections"));
  EXPECT_TRUE((*c)->WaitClosed(absl::Seconds(5)));
  EXPECT_EQ(server->stats().refused_connections.load(), 1);
  // The two admitted connections still work.
  ASSERT_TRUE((*a)->Send(HttpRequestBytes("POST", "/a", "ok")).ok());
  EXPECT_EQ((*a)->ReadResponse().body, "POST /a ok");
}

TEST(HttpServerTest, StopClosesOpenConnectionsAndReturns) {
  HeldExchange held;
  auto server = StartServer(Config(), held.Handler());  // Never answered.
  ASSERT_NE(server, nullptr);
  auto c = HttpConnection::Open(server->address());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Send(HttpRequestBytes("POST", "/hang", "{}")).ok());
  std::shared_ptr<HttpExchange> exchange = held.Take();
  ASSERT_NE(exchange, nullptr);
  const absl::Time start = absl::Now();
  server->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE((*c)->WaitClosed(absl::Seconds(5)));
  // An exchange that outlives the stopped server is harmless.
  exchange->Respond(200, {}, "too late");
  exchange.reset();
  server.reset();
}

TEST(HttpServerTest, ManyConcurrentStreamsAnsweredFromOtherThreads) {
  constexpr int kClients = 100;
  constexpr int kParts = 20;
  auto server = StartServer(Config(), [](HttpRequest, std::shared_ptr<HttpExchange> exchange) {
    // Answered from a thread of its own, as the gRPC side does.
    std::thread([exchange] {
      exchange->StartStream(200, {}, nullptr);
      std::vector<std::string> parts;
      for (int i = 0; i < kParts; ++i) parts.push_back(absl::StrCat("part", i, ";"));
      StreamParts(exchange, parts);
    }).detach();
  });
  ASSERT_NE(server, nullptr);
  std::string expected;
  for (int i = 0; i < kParts; ++i) absl::StrAppend(&expected, "part", i, ";");
  std::atomic<int> good{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&] {
      auto r =
          pdserve::client::HttpCall(server->address(), "POST", "/s", "{}", "", absl::Seconds(30));
      if (r.ok() && r->body == expected) ++good;
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(good.load(), kClients);
}

}  // namespace
}  // namespace pdserve::router::openai
