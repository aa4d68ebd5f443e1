// The OpenAI-compatible HTTP front on a real local cluster (router with --http_listen, a
// prefill worker, decode workers; tiny model): the official openai npm client end to end,
// raw SSE framing as curl -N sees it, the same tokens as the gRPC API, every error with its
// HTTP status, slow senders, clients that disconnect mid-stream (their blocks freed at once),
// 1,000 concurrent streams, and the router still serving after all of it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "nlohmann/json.hpp"
#include "tests/router/cluster_fixture.h"
#include "tests/testing/http_client.h"
#include "tests/testing/poll.h"
#include "tools/client/generation_client.h"
#include "tools/client/http_connection.h"

namespace pdserve::router::openai {
namespace {

using pdserve::client::HttpCall;
using pdserve::client::HttpConnection;
using pdserve::client::HttpRequestBytes;
using pdserve::client::HttpResponseParts;
using pdserve::testing::ClusterOptions;
using pdserve::testing::LocalCluster;
using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;

const std::string kFixture = std::string(PDSERVE_BUILD_DIR) + "/npm-fixtures/openai";

std::string HttpAddress(LocalCluster& cluster) {
  return cluster.router().serving_info().at("http");
}

// Runs a command (PATH lookup) to completion; its exit status and output.
std::pair<int, std::string> RunCommand(std::vector<std::string> args,
                                       absl::Duration timeout = absl::Seconds(120)) {
  auto child = ChildProcess::Start(ChildOptions{
      .binary = "/usr/bin/env", .args = std::move(args), .expect_serving_info = false});
  if (!child.ok()) return {-1, std::string(child.status().message())};
  std::optional<int> status = (*child)->WaitExit(timeout);
  if (!status.has_value()) return {-1, "timed out: " + (*child)->Log()};
  return {WIFEXITED(*status) ? WEXITSTATUS(*status) : -1, (*child)->Log()};
}

// Every decode worker idle with all blocks free or cached, and nothing in flight at the router.
void ExpectNothingLeaked(LocalCluster& cluster) {
  for (auto& d : cluster.decode()) {
    EXPECT_TRUE(LocalCluster::WaitForBaseline(*d, absl::Seconds(30))) << "decode blocks leaked";
  }
  EXPECT_TRUE(pdserve::testing::PollUntil(
      [&] {
        return pdserve::testing::Metric(cluster.router().metrics_address(),
                                        "pdserve_router_requests_in_flight ") == 0;
      },
      absl::Seconds(10)))
      << "router requests still in flight";
  EXPECT_TRUE(cluster.router().running());
}

std::string Chat(const std::string& content, int max_tokens, bool stream,
                 const std::string& extra = "") {
  return absl::StrCat(R"({"model": "tiny", "messages": [{"role": "user", "content": )",
                      json(content).dump(), R"(}], "max_tokens": )", max_tokens,
                      R"(, "temperature": 0, "ignore_eos": true, "stream": )",
                      stream ? "true" : "false", extra, "}");
}

// A chat stream of `max_tokens` tokens on a fresh connection, returned once its first text
// arrived (null if it did not).
std::unique_ptr<HttpConnection> OpenLongStream(const std::string& address,
                                               const std::string& prompt, int max_tokens = 3000) {
  auto c = HttpConnection::Open(address);
  if (!c.ok()) return nullptr;
  if (!(*c)->Send(HttpRequestBytes("POST", "/v1/chat/completions", Chat(prompt, max_tokens, true)))
           .ok())
    return nullptr;
  (*c)->ReadUntil([](const std::string& r) { return r.find("\"content\"") != std::string::npos; },
                  absl::Seconds(30));
  if ((*c)->received().find("\"content\"") == std::string::npos) return nullptr;
  return *std::move(c);
}

class OpenAiFrontTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions options;
    options.decode_workers = 2;
    options.router_flags = {"--http_listen=127.0.0.1:0", "--http_read_timeout=1s",
                            "--http_max_body_bytes=262144", "--max_waiting_per_worker=1024",
                            // 1,000 chats arrive at once: room to queue them for tokenizing.
                            "--max_tokenize_queue=2048"};
    options.decode_flags = {"--max_waiting=2048"};
    cluster_ = LocalCluster::Start(options).release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr); }
  static LocalCluster* cluster_;
};
LocalCluster* OpenAiFrontTest::cluster_ = nullptr;

TEST_F(OpenAiFrontTest, TheOfficialOpenAiClientWorksEndToEnd) {
  auto [fixture_rc, fixture_log] = RunCommand(
      {std::string(PDSERVE_SOURCE_DIR) + "/tests/router/openai/client_fixture/setup_fixture.sh",
       kFixture},
      absl::Seconds(280));
  ASSERT_EQ(fixture_rc, 0) << fixture_log;
  auto [rc, log] =
      RunCommand({"node",
                  std::string(PDSERVE_SOURCE_DIR) +
                      "/tests/router/openai/client_fixture/openai_client_check.mjs",
                  kFixture + "/node_modules", "http://" + HttpAddress(*cluster_), "tiny"});
  EXPECT_EQ(rc, 0) << log;
  EXPECT_THAT(log, HasSubstr("all checks passed"));
  ExpectNothingLeaked(*cluster_);
}

TEST_F(OpenAiFrontTest, CurlSeesServerSentEventsFramedAsOpenAiSendsThem) {
  const std::string url = "http://" + HttpAddress(*cluster_) + "/v1/chat/completions";
  auto [rc, out] = RunCommand(
      {"curl", "-sS", "-N", "-i", "--max-time", "60", url, "-H", "Content-Type: application/json",
       "-d", Chat("Hi", 6, true, R"(, "stream_options": {"include_usage": true})")});
  ASSERT_EQ(rc, 0) << out;
  const size_t body_start = out.find("\r\n\r\n");
  ASSERT_NE(body_start, std::string::npos) << out;
  const std::string head = out.substr(0, body_start);
  EXPECT_THAT(head, HasSubstr("HTTP/1.1 200 OK"));
  EXPECT_THAT(head, HasSubstr("Content-Type: text/event-stream"));
  EXPECT_THAT(head, HasSubstr("Transfer-Encoding: chunked"));
  const std::string body = out.substr(body_start + 4);
  // Events are "data: <payload>" lines, each followed by a blank line; the last is [DONE].
  std::vector<std::string> events = absl::StrSplit(body, "\n\n", absl::SkipEmpty());
  ASSERT_GE(events.size(), 4u) << body;
  EXPECT_EQ(events.back(), "data: [DONE]");
  EXPECT_TRUE(absl::EndsWith(body, "data: [DONE]\n\n"));
  int text_chunks = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    ASSERT_TRUE(absl::StartsWith(events[i], "data: ")) << events[i];
    ASSERT_EQ(events[i].find('\n'), std::string::npos) << "an event spans lines: " << events[i];
    const json chunk = json::parse(events[i].substr(6));
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    if (!chunk["choices"].empty() && chunk["choices"][0]["delta"].contains("content"))
      ++text_chunks;
  }
  EXPECT_GE(text_chunks, 2);
  const json usage = json::parse(events[events.size() - 2].substr(6));
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
}

TEST_F(OpenAiFrontTest, TheSameTokensAsTheGrpcApi) {
  // Greedy completions of a token-id prompt, both ways.
  v1::GenerateRequest request = client::MakeRequest({5, 9, 13, 21, 34}, 12);
  request.mutable_sampling()->set_ignore_eos(true);
  const client::GenerationOutcome grpc_result =
      client::CallGenerate(cluster_->channel(), request, absl::Seconds(60));
  ASSERT_TRUE(grpc_result.status.ok()) << grpc_result.status.error_message();
  auto http = HttpCall(HttpAddress(*cluster_), "POST", "/v1/completions",
                       R"({"model": "tiny", "prompt": [5, 9, 13, 21, 34], "max_tokens": 12,
                           "temperature": 0, "ignore_eos": true})");
  ASSERT_TRUE(http.ok()) << http.status();
  ASSERT_EQ(http->status, 200) << http->body;
  const json body = json::parse(http->body);
  EXPECT_EQ(body["choices"][0]["text"], grpc_result.text);
  EXPECT_EQ(body["usage"]["completion_tokens"], 12);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);
  // x-request-id names the request everywhere, and comes back.
  auto named =
      HttpCall(HttpAddress(*cluster_), "POST", "/v1/completions",
               R"({"prompt": "Hello", "max_tokens": 2})", "x-request-id: my-request-42\r\n");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->headers["x-request-id"], "my-request-42");
  EXPECT_EQ(json::parse(named->body)["id"], "cmpl-my-request-42");
}

TEST_F(OpenAiFrontTest, ErrorsAreOpenAiErrorsWithTheirHttpStatus) {
  const std::string address = HttpAddress(*cluster_);
  struct Case {
    std::string method, path, body, headers;
    int status;
    const char* message;
    const char* param;  // null: param is null
  };
  const Case cases[] = {
      {"POST", "/v1/chat/completions", "{\"messages\": [", "", 400, "body: is not valid JSON",
       nullptr},
      {"POST", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": 7}]})", "", 400,
       "messages[0].content", "messages[0].content"},
      {"POST", "/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "hi"}]})", "",
       400, "messages[0].role: 'wizard' is neither an OpenAI API role", "messages"},
      {"GET", "/v1/models/no-such-model", "", "", 404, "The model 'no-such-model' does not exist",
       "model"},
      {"POST", "/v1/completions", R"({"prompt": "x", "max_tokens": "lots"})", "", 400,
       "max_tokens: must be an integer", "max_tokens"},
      {"POST", "/v1/completions", R"({"prompt": "x", "top_p": 7})", "", 400, "sampling.top_p",
       "top_p"},
      {"POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 100000})", "", 400,
       "exceeds the model's context", "max_tokens"},
      {"POST", "/v1/completions", R"({"prompt": "x", "model": "gpt-4"})", "", 404,
       "not served here", "model"},
      {"POST", "/v1/completions", R"({"prompt": "x"})", "x-pdserve-timeout-ms: soon\r\n", 400,
       "x-pdserve-timeout-ms", "x-pdserve-timeout-ms"},
      {"POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "x": ")" + std::string(300000, 'a') +
           "\"}",
       "", 413, "larger than 262144 bytes", nullptr},
      {"GET", "/v1/nope", "", "", 404, "no such endpoint", nullptr},
      {"GET", "/v1/completions", "", "", 405, "use POST", nullptr},
  };
  for (const Case& c : cases) {
    auto r = HttpCall(address, c.method, c.path, c.body, c.headers);
    ASSERT_TRUE(r.ok()) << c.message << ": " << r.status();
    EXPECT_EQ(r->status, c.status) << c.message << ": " << r->body;
    const json body = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(body.is_discarded()) << r->body;
    EXPECT_THAT(body["error"]["message"].get<std::string>(), HasSubstr(c.message));
    EXPECT_TRUE(body["error"]["type"].is_string());
    if (c.param == nullptr) {
      EXPECT_TRUE(body["error"]["param"].is_null()) << r->body;
    } else {
      EXPECT_EQ(body["error"]["param"], c.param) << r->body;
    }
  }
  // One model by its id, as OpenAI's GET /v1/models/{model}.
  auto model = HttpCall(address, "GET", "/v1/models/tiny", "");
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(model->status, 200) << model->body;
  EXPECT_EQ(json::parse(model->body)["id"], "tiny");
  EXPECT_EQ(json::parse(model->body)["object"], "model");
  // A deadline that passes before the answer: 504.
  auto late = HttpCall(address, "POST", "/v1/completions",
                       R"({"prompt": "x", "max_tokens": 3000, "ignore_eos": true})",
                       "x-pdserve-timeout-ms: 300\r\n");
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->status, 504) << late->body;
  EXPECT_EQ(json::parse(late->body)["error"]["type"], "timeout_error");
  ExpectNothingLeaked(*cluster_);
}

TEST_F(OpenAiFrontTest, SlowSendersAreClosedAndTheRouterKeepsServing) {
  const std::string address = HttpAddress(*cluster_);
  auto slow = HttpConnection::Open(address);
  ASSERT_TRUE(slow.ok());
  ASSERT_TRUE((*slow)->Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le").ok());
  // --http_read_timeout=1s: the connection goes; nothing was answered.
  EXPECT_TRUE((*slow)->WaitClosed(absl::Seconds(10)));
  EXPECT_TRUE((*slow)->received().empty()) << (*slow)->received();
  auto ok = HttpCall(address, "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200);
}

TEST_F(OpenAiFrontTest, AClientThatDisconnectsMidStreamCancelsItsRequestEverywhere) {
  const std::string address = HttpAddress(*cluster_);
  const std::string metrics = cluster_->router().metrics_address();
  const double cancelled_before = pdserve::testing::Metric(
      metrics, "pdserve_router_http_requests_total{code=\"499\",path=\"/v1/chat/completions\"}");
  for (int i = 0; i < 4; ++i) {
    auto c = HttpConnection::Open(address);
    ASSERT_TRUE(c.ok());
    // Long streams: 3,000 tokens that would take far longer than the test.
    ASSERT_TRUE((*c)->Send(HttpRequestBytes("POST", "/v1/chat/completions",
                                            Chat(absl::StrCat("story ", i), 3000, true)))
                    .ok());
    (*c)->ReadUntil([](const std::string& r) { return r.find("\"content\"") != std::string::npos; },
                    absl::Seconds(30));
    ASSERT_THAT((*c)->received(), HasSubstr("\"content\""));
    (*c)->Close();
  }
  // Every decode worker is idle with its blocks back long before 3,000 tokens could be made.
  ExpectNothingLeaked(*cluster_);
  EXPECT_TRUE(pdserve::testing::PollUntil(
      [&] {
        return pdserve::testing::Metric(metrics,
                                        "pdserve_router_http_requests_total{code=\"499\",path=\"/"
                                        "v1/chat/completions\"}") >=
               std::max(0.0, cancelled_before) + 4;
      },
      absl::Seconds(10)));
}

// Streams from one thread over many sockets at once (poll): each sends a request and reads
// until its stream ends or the server closes the connection.
struct StreamOutcome {
  bool done = false;  // "data: [DONE]" seen.
  int status = 0;
};
std::vector<StreamOutcome> ConcurrentStreams(const std::string& address, int count,
                                             const std::string& request, absl::Duration timeout) {
  std::vector<std::unique_ptr<HttpConnection>> connections(count);
  std::vector<StreamOutcome> outcomes(count);
  std::vector<bool> finished(count, false);
  for (int i = 0; i < count; ++i) {
    auto c = HttpConnection::Open(address);
    if (c.ok() && (*c)->Send(request).ok()) {
      connections[i] = *std::move(c);
    } else {
      finished[i] = true;
    }
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::vector<pollfd> fds;
    std::vector<int> which;
    for (int i = 0; i < count; ++i) {
      if (finished[i]) continue;
      fds.push_back(pollfd{connections[i]->fd(), POLLIN, 0});
      which.push_back(i);
    }
    if (fds.empty()) break;
    if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const int i = which[k];
      connections[i]->ReadAvailable();
      const std::string& r = connections[i]->received();
      if (absl::StrContains(r, "data: [DONE]") || connections[i]->peer_closed()) {
        finished[i] = true;
        outcomes[i].done = absl::StrContains(r, "data: [DONE]");
        outcomes[i].status = pdserve::client::ParseHttpResponse(r).status;
      }
    }
  }
  return outcomes;
}

TEST_F(OpenAiFrontTest, AThousandConcurrentStreams) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur < 2500) GTEST_SKIP() << "needs 2500 file descriptors, have " << limit.rlim_cur;
  constexpr int kStreams = 1000;
  const std::string request =
      HttpRequestBytes("POST", "/v1/chat/completions", Chat("hello", 8, true));
  const absl::Time start = absl::Now();
  const std::vector<StreamOutcome> outcomes =
      ConcurrentStreams(HttpAddress(*cluster_), kStreams, request, absl::Seconds(240));
  int ok = 0;
  std::map<std::string, int> other;  // What the others got, for the failure message.
  for (const StreamOutcome& o : outcomes) {
    if (o.done && o.status == 200) {
      ++ok;
    } else {
      ++other[absl::StrCat("status ", o.status, o.done ? " with [DONE]" : " without [DONE]")];
    }
  }
  for (const auto& [what, n] : other) std::printf("%d streams: %s\n", n, what.c_str());
  EXPECT_EQ(ok, kStreams) << "streams that ended with [DONE] after 200";
  std::printf("1000 concurrent streams in %s\n", absl::FormatDuration(absl::Now() - start).c_str());
  ExpectNothingLeaked(*cluster_);
  auto health = HttpCall(HttpAddress(*cluster_), "GET", "/health", "");
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 200);
}

// Overload and an empty cluster, each on a router of its own.
TEST(OpenAiFrontLimitsTest, OverloadIs429WithRetryAfterAndNoWorkerIs503) {
  ClusterOptions options;
  options.prefill_workers = 0;
  options.decode_workers = 1;
  options.router_flags = {"--http_listen=127.0.0.1:0", "--max_in_flight=1", "--retry_after=1500ms"};
  auto cluster = LocalCluster::Start(options);
  ASSERT_NE(cluster, nullptr);
  const std::string address = HttpAddress(*cluster);
  // One long stream holds the only slot.
  std::unique_ptr<HttpConnection> busy = OpenLongStream(address, "hold");
  ASSERT_NE(busy, nullptr);
  auto refused =
      HttpCall(address, "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->status, 429) << refused->body;
  EXPECT_EQ(refused->headers["retry-after"], "2");  // 1500 ms, rounded up.
  EXPECT_EQ(json::parse(refused->body)["error"]["type"], "rate_limit_error");
  busy->Close();
  ExpectNothingLeaked(*cluster);

  // The decode worker gone: /health and requests say the cluster cannot serve.
  cluster->decode()[0]->Kill();
  ASSERT_TRUE(cluster->WaitForWorkers(0, 0, absl::Seconds(15)));
  auto health = HttpCall(address, "GET", "/health", "");
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 503);
  auto unavailable =
      HttpCall(address, "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
  ASSERT_TRUE(unavailable.ok());
  EXPECT_EQ(unavailable->status, 503) << unavailable->body;
  EXPECT_EQ(json::parse(unavailable->body)["error"]["type"], "service_unavailable_error");
}

TEST(OpenAiFrontLimitsTest, AnApiKeyIsRequiredWhenConfigured) {
  char dir_template[] = "/tmp/pdserve-key-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string key_file = std::string(dir_template) + "/key";
  {
    std::ofstream out(key_file);
    out << "sk-test-123\n";
  }
  ClusterOptions options;
  options.prefill_workers = 0;
  options.decode_workers = 1;
  options.router_flags = {"--http_listen=127.0.0.1:0", "--http_api_key_file=" + key_file};
  auto cluster = LocalCluster::Start(options);
  ASSERT_NE(cluster, nullptr);
  const std::string address = HttpAddress(*cluster);
  const std::string body = R"({"prompt": "x", "max_tokens": 2})";
  for (const std::string& header : {std::string(""), std::string("Authorization: Bearer wrong\r\n"),
                                    std::string("Authorization: Bearer sk-test-1234\r\n"),
                                    std::string("Authorization: sk-test-123\r\n")}) {
    auto refused = HttpCall(address, "POST", "/v1/completions", body, header);
    ASSERT_TRUE(refused.ok());
    EXPECT_EQ(refused->status, 401) << header;
    EXPECT_EQ(refused->headers["www-authenticate"], "Bearer");
    EXPECT_EQ(json::parse(refused->body)["error"]["code"], "invalid_api_key");
  }
  auto models = HttpCall(address, "GET", "/v1/models", "");
  ASSERT_TRUE(models.ok());
  EXPECT_EQ(models->status, 401);
  auto allowed =
      HttpCall(address, "POST", "/v1/completions", body, "Authorization: Bearer sk-test-123\r\n");
  ASSERT_TRUE(allowed.ok());
  EXPECT_EQ(allowed->status, 200) << allowed->body;
  auto health = HttpCall(address, "GET", "/health", "");  // Probes carry no key.
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 200);
  std::filesystem::remove_all(dir_template);
}

// This machine's decode speed through `cluster`: seconds per token of one stream alone (the
// drain tests size their streams by it, so that they hold on any machine, fast or slow).
double SecondsPerToken(LocalCluster& cluster) {
  v1::GenerateRequest r = client::MakeRequest({3, 4, 5}, 64);
  r.mutable_sampling()->set_ignore_eos(true);
  const client::GenerationOutcome out =
      client::CallGenerate(cluster.channel(), r, absl::Seconds(120));
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
  if (out.token_times.size() < 2) return 1.0;
  return absl::ToDoubleSeconds(out.token_times.back() - out.token_times.front()) /
         static_cast<double>(out.token_times.size() - 1);
}

// A gRPC Generate stream of `tokens` tokens (ignore_eos) on a thread of its own.
class BackgroundStream {
 public:
  BackgroundStream(std::shared_ptr<grpc::Channel> channel, int tokens)
      : thread_([this, channel, tokens] {
          v1::GenerateRequest r = client::MakeRequest({7, 8, 9}, tokens);
          r.mutable_sampling()->set_ignore_eos(true);
          outcome_ = client::CallGenerate(channel, r, absl::Seconds(180),
                                          [this](const v1::GenerateResponse&) {
                                            if (!started_.HasBeenNotified()) started_.Notify();
                                          });
          done_ = true;
        }) {}
  ~BackgroundStream() { Join(); }
  bool WaitStarted(absl::Duration timeout) {
    return started_.WaitForNotificationWithTimeout(timeout);
  }
  bool done() const { return done_.load(); }
  const client::GenerationOutcome& Join() {
    if (thread_.joinable()) thread_.join();
    return outcome_;
  }

 private:
  absl::Notification started_;
  std::atomic<bool> done_{false};
  client::GenerationOutcome outcome_;
  std::thread thread_;  // Last: starts once the rest exists.
};

// SIGTERM while an SSE stream and a gRPC stream run: both finish (within --drain_timeout),
// new HTTP connections and new gRPC calls are refused, and the router exits cleanly. The
// streams are sized to last a few seconds on this machine, well inside the drain timeout.
TEST(OpenAiFrontLimitsTest, ADrainingRouterFinishesOpenStreamsAndRefusesNewConnections) {
  ClusterOptions options;
  options.prefill_workers = 0;
  options.decode_workers = 1;
  options.router_flags = {"--http_listen=127.0.0.1:0", "--drain_timeout=120s"};
  auto cluster = LocalCluster::Start(options);
  ASSERT_NE(cluster, nullptr);
  // About 4 s of decoding for two streams side by side (each at most half the speed of one
  // alone, slower still as their contexts grow); the drain allows 30 times that.
  const int tokens = std::clamp(static_cast<int>(2.0 / SecondsPerToken(*cluster)), 200, 1500);
  const std::string address = HttpAddress(*cluster);
  std::unique_ptr<HttpConnection> stream = OpenLongStream(address, "drain", tokens);
  ASSERT_NE(stream, nullptr);
  BackgroundStream grpc_stream(cluster->channel(), tokens);  // A gRPC stream beside it.
  ASSERT_TRUE(grpc_stream.WaitStarted(absl::Seconds(30)));
  ASSERT_EQ(kill(cluster->router().pid(), SIGTERM), 0);
  // Both streams were still running when the drain began (else this test proves nothing).
  EXPECT_FALSE(grpc_stream.done()) << tokens << " tokens finished before SIGTERM";
  EXPECT_THAT(stream->received(), Not(HasSubstr("data: [DONE]")));
  // New connections are refused once the router drains.
  EXPECT_TRUE(pdserve::testing::PollUntil(
      [&] {
        auto c = HttpConnection::Open(address);
        return !c.ok();
      },
      absl::Seconds(10)));
  // The open stream runs to its end.
  stream->ReadUntil(
      [](const std::string& r) { return r.find("data: [DONE]") != std::string::npos; },
      absl::Seconds(150));
  EXPECT_THAT(stream->received(), HasSubstr("\"finish_reason\":\"length\""));
  EXPECT_THAT(stream->received(), HasSubstr("data: [DONE]"));
  const client::GenerationOutcome& grpc_outcome = grpc_stream.Join();
  EXPECT_TRUE(grpc_outcome.status.ok()) << grpc_outcome.status.error_message();
  EXPECT_EQ(grpc_outcome.tokens.size(), static_cast<size_t>(tokens));
  const std::optional<int> exit_status = cluster->router().WaitExit(absl::Seconds(30));
  ASSERT_TRUE(exit_status.has_value());
  EXPECT_TRUE(WIFEXITED(*exit_status) && WEXITSTATUS(*exit_status) == 0) << cluster->router().Log();
}

// The drain timeout is the orchestrator's grace period less a margin: past it the process is
// killed. So streams still running at the deadline are ended by the router itself, each with
// a status that says why and invites a retry elsewhere (UNAVAILABLE; an SSE error event), never
// a bare transport failure, and their decode worker frees their KV. The streams are sized to
// outlast the 1 s drain many times over on this machine.
TEST(OpenAiFrontLimitsTest, StreamsStillRunningWhenTheDrainTimesOutEndWithAClearRetryableError) {
  ClusterOptions options;
  options.prefill_workers = 0;
  options.decode_workers = 1;
  options.router_flags = {"--http_listen=127.0.0.1:0", "--drain_timeout=1s"};
  auto cluster = LocalCluster::Start(options);
  ASSERT_NE(cluster, nullptr);
  // At least 30 s of decoding for each stream (the tiny model's context allows 4,096 tokens).
  const int tokens = std::clamp(static_cast<int>(30.0 / SecondsPerToken(*cluster)), 500, 4000);
  const std::string address = HttpAddress(*cluster);
  std::unique_ptr<HttpConnection> stream = OpenLongStream(address, "cut", tokens);
  ASSERT_NE(stream, nullptr);
  BackgroundStream grpc_stream(cluster->channel(), tokens);
  ASSERT_TRUE(grpc_stream.WaitStarted(absl::Seconds(30)));
  const absl::Time sigterm = absl::Now();
  ASSERT_EQ(kill(cluster->router().pid(), SIGTERM), 0);
  stream->ReadUntil(
      [](const std::string& r) { return r.find("data: [DONE]") != std::string::npos; },
      absl::Seconds(60));
  const client::GenerationOutcome& grpc_outcome = grpc_stream.Join();
  const absl::Duration ended = absl::Now() - sigterm;
  // The SSE stream: an error event naming the drain, then [DONE]; no finish_reason.
  EXPECT_THAT(stream->received(), HasSubstr("drain timeout (1s) passed"));
  EXPECT_THAT(stream->received(), HasSubstr("data: [DONE]"));
  EXPECT_THAT(stream->received(), Not(HasSubstr("\"finish_reason\":\"length\"")));
  // The gRPC stream: UNAVAILABLE with the same reason, after some of its tokens.
  EXPECT_EQ(grpc_outcome.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(grpc_outcome.status.error_message(), HasSubstr("drain timeout (1s) passed"));
  EXPECT_GT(grpc_outcome.tokens.size(), 0u);
  EXPECT_LT(grpc_outcome.tokens.size(), static_cast<size_t>(tokens));
  EXPECT_LT(ended, absl::Seconds(20)) << "the streams were not ended at the drain deadline";
  const std::optional<int> exit_status = cluster->router().WaitExit(absl::Seconds(30));
  ASSERT_TRUE(exit_status.has_value());
  EXPECT_TRUE(WIFEXITED(*exit_status) && WEXITSTATUS(*exit_status) == 0) << cluster->router().Log();
  // The decode worker was told: both requests' KV blocks are free again.
  EXPECT_TRUE(LocalCluster::WaitForBaseline(*cluster->decode()[0], absl::Seconds(30)))
      << LocalCluster::DecodeStats(*cluster->decode()[0]).DebugString();
}

// A request that has produced nothing yet (queued behind another) is cancelled the moment its
// client leaves: the connection is watched while the answer is pending, not only when a write
// fails.
TEST(OpenAiFrontLimitsTest, AQueuedRequestIsCancelledWhenItsClientLeaves) {
  ClusterOptions options;
  options.prefill_workers = 0;
  options.decode_workers = 1;
  options.router_flags = {"--http_listen=127.0.0.1:0"};
  options.decode_flags = {"--max_num_seqs=1"};
  auto cluster = LocalCluster::Start(options);
  ASSERT_NE(cluster, nullptr);
  const std::string address = HttpAddress(*cluster);
  const std::string metrics = cluster->router().metrics_address();
  auto in_flight = [&] {
    return pdserve::testing::Metric(metrics, "pdserve_router_requests_in_flight ");
  };
  std::unique_ptr<HttpConnection> running = OpenLongStream(address, "hold");
  ASSERT_NE(running, nullptr);
  // A whole (non-streamed) answer: nothing is written to its client until it completes.
  auto queued = HttpConnection::Open(address);
  ASSERT_TRUE(queued.ok());
  ASSERT_TRUE((*queued)
                  ->Send(HttpRequestBytes("POST", "/v1/chat/completions", Chat("wait", 50, false)))
                  .ok());
  ASSERT_TRUE(pdserve::testing::PollUntil([&] { return in_flight() == 2; }, absl::Seconds(10)));
  (*queued)->Close();
  EXPECT_TRUE(pdserve::testing::PollUntil([&] { return in_flight() == 1; }, absl::Seconds(2)))
      << "the queued request outlived its client";
  // The long stream was not disturbed.
  running->ClearReceived();
  running->ReadUntil(
      [](const std::string& r) { return r.find("\"content\"") != std::string::npos; },
      absl::Seconds(10));
  EXPECT_THAT(running->received(), HasSubstr("\"content\""));
  running->Close();
  ExpectNothingLeaked(*cluster);
}

}  // namespace
}  // namespace pdserve::router::openai
