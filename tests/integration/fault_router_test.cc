// Fault suite (label "fault"): the router under load. Hundreds of concurrent streams with
// random cancellations once aborted the router ("pure virtual method called": a read started
// on a downstream call gRPC had already finished); a full router must refuse at once with a
// retry-after hint and lose nothing. Every scenario ends with the shared baseline check.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/fd_limits.h"
#include "common/net_address.h"
#include "gtest/gtest.h"
#include "server/health_client.h"
#include "server/registry_client.h"
#include "server/worker_identity_service.h"
#include "tests/integration/fault_check.h"
#include "tests/testing/greedy_reference.h"
#include "tests/testing/http_client.h"
#include "tests/testing/loopback_client.h"
#include "tests/testing/poll.h"
#include "tools/client/generation_client.h"
#include "wire/report_bridge.h"

namespace pdserve::testing {
namespace {

struct LoadResult {
  int ok = 0;
  int cancelled = 0;
  int exhausted = 0;
  std::vector<std::string> unexpected;
};

// `streams` concurrent Generate calls of short random prompts; about `cancel_fraction` of
// them are cancelled at a random moment within their first 300 ms.
LoadResult RunConcurrentStreams(const std::shared_ptr<grpc::Channel>& channel, int streams,
                                double cancel_fraction, uint32_t seed) {
  LoadResult result;
  absl::Mutex mu;
  std::vector<std::thread> threads;
  threads.reserve(streams);
  for (int i = 0; i < streams; ++i) {
    threads.emplace_back([&, i] {
      std::mt19937 rng(seed + i);
      std::vector<int32_t> prompt(5 + rng() % 40);
      for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 200 + 3);
      v1::GenerateRequest request = client::MakeRequest(prompt, 4 + rng() % 20);
      request.mutable_sampling()->set_ignore_eos(true);
      const bool cancel = std::uniform_real_distribution<double>(0, 1)(rng) < cancel_fraction;
      const absl::Duration cancel_after = absl::Milliseconds(rng() % 300);
      client::CallHandle handle;
      absl::Notification done;
      std::thread canceller;
      if (cancel) {
        canceller = std::thread([&] {
          if (!done.WaitForNotificationWithTimeout(cancel_after)) handle.Cancel();
        });
      }
      const client::GenerationOutcome out =
          client::CallGenerate(channel, request, absl::Seconds(120), nullptr, &handle);
      done.Notify();
      if (canceller.joinable()) canceller.join();
      absl::MutexLock lock(&mu);
      switch (out.status.error_code()) {
        case grpc::StatusCode::OK:
          ++result.ok;
          if (out.tokens.size() != static_cast<size_t>(request.sampling().max_tokens())) {
            result.unexpected.push_back(
                absl::StrCat("stream ", i, ": ", out.tokens.size(), " tokens"));
          }
          break;
        case grpc::StatusCode::CANCELLED:
          if (cancel) {
            ++result.cancelled;
            break;
          }
          [[fallthrough]];
        case grpc::StatusCode::RESOURCE_EXHAUSTED:
          if (out.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
            ++result.exhausted;
            break;
          }
          [[fallthrough]];
        default:
          result.unexpected.push_back(absl::StrCat("stream ", i, ": ", out.status.error_code(), " ",
                                                   out.status.error_message()));
      }
    });
  }
  for (auto& t : threads) t.join();
  return result;
}

TEST(RouterFaultTest, ThreeHundredConcurrentStreamsWithCancellationsKeepTheRouterUp) {
  // Reads are started 2 ms after the decision to start them, so that a decode worker's
  // stream often ends in between: the window in which the router used to abort.
  auto cluster =
      LocalCluster::Start(ClusterOptions{.router_flags = {"--testing_relay_read_delay=2ms"}});
  ASSERT_NE(cluster, nullptr);
  for (uint32_t round = 0; round < 2; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    const LoadResult r = RunConcurrentStreams(cluster->channel(), 300, 0.25, 1000 * (round + 1));
    EXPECT_TRUE(r.unexpected.empty())
        << r.unexpected.size() << " unexpected outcomes, first: " << r.unexpected[0];
    EXPECT_EQ(r.exhausted, 0);
    EXPECT_GT(r.ok, 150);
    ASSERT_TRUE(cluster->router().running()) << cluster->router().Log();
  }
  ExpectClusterAtBaseline(*cluster);
}

// The stress test the ThreadSanitizer build runs (scripts/test.sh): hundreds of streams with
// random cancellations while a decode worker is killed. Streams on the killed worker end
// UNAVAILABLE; nothing else is lost. PDSERVE_STRESS_STREAMS sizes it (default 300).
TEST(RouterFaultTest, StressStreamsWithCancellationsAndAKilledDecodeWorker) {
  const char* env = std::getenv("PDSERVE_STRESS_STREAMS");
  const int streams = env != nullptr ? std::max(10, std::atoi(env)) : 300;
  auto cluster = LocalCluster::Start(ClusterOptions{.prefill_workers = 1, .decode_workers = 3});
  ASSERT_NE(cluster, nullptr);
  LoadResult result;
  std::thread load([&] { result = RunConcurrentStreams(cluster->channel(), streams, 0.25, 4242); });
  // Killed while the router relays streams to it.
  const std::string victim = cluster->decode()[2]->grpc_address();
  EXPECT_TRUE(cluster->WaitForStatus([&](const v1::ClusterStatus& s) {
    for (const v1::WorkerStatus& w : s.workers()) {
      if (w.registration().grpc_address() == victim && w.router_in_flight() > 0) return true;
    }
    return false;
  }));
  cluster->decode()[2]->Kill();
  load.join();
  cluster->decode().pop_back();
  // UNAVAILABLE (code 14) is what a stream on the killed worker gets.
  std::vector<std::string> other;
  for (const std::string& u : result.unexpected) {
    if (!absl::StrContains(u, ": 14 ")) other.push_back(u);
  }
  EXPECT_TRUE(other.empty()) << other.size() << " unexpected outcomes, first: " << other[0];
  EXPECT_GT(result.ok, streams / 3);
  ASSERT_TRUE(cluster->WaitForWorkers(2, 1, absl::Seconds(10)));
  ExpectClusterAtBaseline(*cluster, absl::Seconds(60));
}

// The router restarted on its address: the workers register again by themselves, requests
// in flight at the crash end UNAVAILABLE, and new ones are served.
TEST(RouterFaultTest, RouterRestartedAtItsAddressGetsItsWorkersBack) {
  auto cluster = LocalCluster::Start(ClusterOptions{});
  ASSERT_NE(cluster, nullptr);
  v1::GenerateRequest long_request = client::MakeRequest({1, 2, 3}, 3000);
  long_request.mutable_sampling()->set_ignore_eos(true);
  client::GenerationOutcome in_flight;
  std::thread call([&] {
    in_flight = client::CallGenerate(cluster->channel(), long_request, absl::Seconds(60));
  });
  ASSERT_TRUE(
      cluster->WaitForStatus([](const v1::ClusterStatus& s) { return s.in_flight() >= 1; }));
  ASSERT_TRUE(cluster->RestartRouter());
  call.join();
  EXPECT_EQ(in_flight.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << in_flight.status.error_message();
  ASSERT_TRUE(cluster->WaitForWorkers(2, 1, absl::Seconds(15))) << cluster->Status().DebugString();
  const auto out = client::CallGenerate(cluster->channel(), client::MakeRequest({4, 5, 6}, 5),
                                        absl::Seconds(30));
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
  ExpectClusterAtBaseline(*cluster);
}

// A router that stops running for 10 s (SIGSTOP: a VM stall, a swap storm) used to remove
// every healthy worker on resume (its sweeper ran before the queued load reports were read)
// and end every in-flight stream UNAVAILABLE. The stall is now not held against the workers:
// they stay registered, and the streams their decode workers kept serving complete whole.
TEST(RouterFaultTest, APausedRouterKeepsItsWorkersAndTheirStreams) {
  auto cluster = LocalCluster::Start(ClusterOptions{});
  ASSERT_NE(cluster, nullptr);
  GreedyReference reference;
  constexpr int kStreams = 4;
  // Every prompt made before the first call starts: the calls read them from their threads
  // (appending while they ran moved the vector under them: a SEGFAULT in CI).
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kStreams; ++i) prompts.push_back({1, 2, 3, static_cast<int32_t>(10 + i)});
  std::vector<client::GenerationOutcome> outs(kStreams);
  std::vector<std::thread> calls;
  for (int i = 0; i < kStreams; ++i) {
    calls.emplace_back([&, i] {
      v1::GenerateRequest request = client::MakeRequest(prompts[i], 1500);
      request.mutable_sampling()->set_ignore_eos(true);
      outs[i] = client::CallGenerate(cluster->channel(), request, absl::Seconds(120));
    });
  }
  ASSERT_TRUE(cluster->WaitForStatus(
      [](const v1::ClusterStatus& s) { return s.in_flight() >= static_cast<uint32_t>(kStreams); }));
  ASSERT_EQ(kill(cluster->router().pid(), SIGSTOP), 0);
  // Five report timeouts (2 s) without the router, and longer than the registry channels'
  // keepalive ping (10 s, answered within 5 s).
  absl::SleepFor(absl::Seconds(10));
  ASSERT_EQ(kill(cluster->router().pid(), SIGCONT), 0);
  for (auto& c : calls) c.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << "stream " << i << ": " << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, reference.Generate(prompts[i], 1500)) << "stream " << i;
  }
  const v1::ClusterStatus status = cluster->Status();
  int decode = 0, prefill = 0;
  for (const v1::WorkerStatus& w : status.workers())
    (w.registration().role() == v1::WORKER_ROLE_DECODE ? decode : prefill) += 1;
  EXPECT_EQ(decode, 2) << status.DebugString();
  EXPECT_EQ(prefill, 1) << status.DebugString();
  EXPECT_TRUE(absl::StrContains(cluster->router().Log(), "not counted as its workers' silence"))
      << cluster->router().Log();
  ExpectClusterAtBaseline(*cluster);
}

// Three times what the router admits, at once: the excess is refused at once with
// RESOURCE_EXHAUSTED and a retry-after trailer; everything admitted completes.
TEST(RouterFaultTest, ThreeTimesOverloadIsRefusedAtOnceAndLosesNothing) {
  auto cluster = LocalCluster::Start(ClusterOptions{.router_flags = {"--max_in_flight=40"}});
  ASSERT_NE(cluster, nullptr);
  const LoadResult r = RunConcurrentStreams(cluster->channel(), 120, 0.0, 77);
  EXPECT_TRUE(r.unexpected.empty())
      << r.unexpected.size() << " unexpected outcomes, first: " << r.unexpected[0];
  EXPECT_GT(r.exhausted, 0);
  EXPECT_GE(r.ok, 40);
  EXPECT_EQ(r.ok + r.exhausted, 120);
  ExpectClusterAtBaseline(*cluster);
}

// CPU seconds `pid` has used (user + system).
double CpuSeconds(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start after the last ')'.
  const size_t close_paren = text.rfind(')');
  if (close_paren == std::string::npos) return -1;
  std::vector<std::string> fields = absl::StrSplit(text.substr(close_paren + 2), ' ');
  if (fields.size() < 13) return -1;
  // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
  return (std::stod(fields[11]) + std::stod(fields[12])) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A flood of idle connections past the router's descriptor limit (issue: 400 connections at
// 256 descriptors) once ended its gRPC listener for good (gRPC 1.51 closes a listener on its
// first EMFILE: after the flood, new calls queued in the backlog unanswered while the process
// and its workers' registrations lived on) and spun the HTTP accept loop at 100 % CPU. Now
// each listener stops at its share of the descriptors and keeps accepting (and closing) past
// it, connections already open keep being served, and everything answers once the flood ends.
TEST(RouterFaultTest, AConnectionFloodPastTheDescriptorLimitLeavesEveryListenerServing) {
  constexpr int64_t kRouterFiles = 256;
  // Ten times the router's limit, half on each listener, as far as this process may open.
  ASSERT_TRUE(RaiseFileLimitToHard().ok());
  const int per_listener =
      static_cast<int>(std::min<int64_t>(5 * kRouterFiles, (CurrentFileLimit() - 256) / 2));
  ASSERT_GE(per_listener, 2 * kRouterFiles) << "this process may not open enough descriptors";
  auto cluster = LocalCluster::Start(ClusterOptions{.prefill_workers = 0,
                                                    .decode_workers = 1,
                                                    .router_flags = {"--http_listen=127.0.0.1:0"},
                                                    .router_max_open_files = kRouterFiles});
  ASSERT_NE(cluster, nullptr);
  ChildProcess& router = cluster->router();
  auto http = ParseHostPort(router.serving_info().at("http"), "http");
  auto grpc_port = ParseHostPort(router.grpc_address(), "grpc");
  ASSERT_TRUE(http.ok() && grpc_port.ok());
  auto generate = [](const std::shared_ptr<grpc::Channel>& channel) {
    return client::CallGenerate(channel, client::MakeRequest({1, 2, 3, 4}, 4), absl::Seconds(20))
        .status;
  };
  ASSERT_TRUE(generate(cluster->channel()).ok());  // The channel is open before the flood.

  std::vector<int> flood;
  for (int i = 0; i < per_listener; ++i) {
    const int a = ConnectLoopback(http->port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n");
    const int b = ConnectLoopback(grpc_port->port, "PRI * HTTP/2.0\r\n");
    for (int fd : {a, b}) {
      if (fd >= 0) flood.push_back(fd);
    }
  }
  EXPECT_GT(flood.size(), static_cast<size_t>(kRouterFiles)) << "the flood did not happen";
  // Past its share, the router refuses: it says so, does not spin, and serves the channel it
  // had.
  EXPECT_TRUE(PollUntil([&] { return absl::StrContains(router.Log(), "refusing connections"); },
                        absl::Seconds(10)))
      << router.Log();
  const double cpu_before = CpuSeconds(router.pid());
  absl::SleepFor(absl::Seconds(2));
  const double cpu_during = CpuSeconds(router.pid()) - cpu_before;
  EXPECT_LT(cpu_during, 1.0) << "the router used " << cpu_during
                             << " CPU seconds in 2 s of an idle flood (an accept loop spinning)";
  auto during = generate(cluster->channel());
  EXPECT_TRUE(during.ok()) << during.error_message();
  EXPECT_FALSE(absl::StrContains(router.Log(), "Failed accept4")) << router.Log();

  for (int fd : flood) close(fd);
  // Once the flood is gone, new gRPC and HTTP clients are served.
  EXPECT_TRUE(PollUntil(
      [&] {
        auto state = CheckHealth(router.grpc_address(), absl::Seconds(2));
        return state.ok() && *state == HealthState::kServing;
      },
      absl::Seconds(30)))
      << router.Log();
  auto after =
      generate(grpc::CreateChannel(router.grpc_address(), grpc::InsecureChannelCredentials()));
  EXPECT_TRUE(after.ok()) << after.error_message();
  EXPECT_TRUE(PollUntil(
      [&] {
        auto models = HttpGet(http->ToString(), "/v1/models", absl::Seconds(2));
        return models.ok() && models->status == 200;
      },
      absl::Seconds(30)))
      << router.Log();
  ExpectClusterAtBaseline(*cluster);
}

// Without TLS the registry once took anyone: 1,000 fake decode workers registered and real
// requests were placed on them. With --registration_token_file only workers that send the
// cluster's token register; the others are refused UNAUTHENTICATED, told why, and logged with
// their peer, and no request is placed on them.
TEST(RouterFaultTest, WithoutTheRegistrationTokenNoWorkerRegisters) {
  const std::string token_file =
      absl::StrCat(::testing::TempDir(), "/registration-token-", getpid());
  {
    std::ofstream out(token_file);
    out << "cluster-secret-7f3a\n";
  }
  const std::string flag = "--registration_token_file=" + token_file;
  auto cluster = LocalCluster::Start(ClusterOptions{
      .prefill_workers = 0, .decode_workers = 1, .router_flags = {flag}, .decode_flags = {flag}});
  ASSERT_NE(cluster, nullptr) << "a worker with the token did not register";
  for (const std::string& token : {std::string(), std::string("guess")}) {
    WorkerRegistration fake;
    fake.worker_id = "decode-impostor";
    fake.role = WorkerRole::kDecode;
    fake.grpc_address = "127.0.0.1:1";
    fake.model = "tiny";
    RegistryClient impostor(RegistryClientConfig{.router_address = cluster->registry_address(),
                                                 .min_backoff = absl::Milliseconds(20),
                                                 .max_backoff = absl::Milliseconds(100),
                                                 .registration_token = token},
                            fake, [](bool, auto*, auto*) {});
    impostor.Start();
    EXPECT_TRUE(PollUntil([&] { return !impostor.last_error().empty(); }, absl::Seconds(10)));
    impostor.Stop();
    EXPECT_FALSE(impostor.connected());
    EXPECT_EQ(impostor.registrations(), 0);
    EXPECT_TRUE(absl::StrContains(impostor.last_error(), "UNAUTHENTICATED"))
        << impostor.last_error();
    EXPECT_TRUE(absl::StrContains(impostor.last_error(), "--registration_token_file"))
        << impostor.last_error();
  }
  EXPECT_TRUE(
      absl::StrContains(cluster->router().Log(), "refused a registration from ipv4:127.0.0.1"))
      << cluster->router().Log();
  // (Logged at most every 5 s: the second impostor's refusal may not be.)
  EXPECT_TRUE(absl::StrContains(cluster->router().Log(), "registration token missing"));
  const v1::ClusterStatus status = cluster->Status();
  ASSERT_EQ(status.workers_size(), 1) << status.DebugString();
  EXPECT_NE(status.workers(0).registration().worker_id(), "decode-impostor");
  for (int i = 0; i < 4; ++i) {
    const auto out = client::CallGenerate(cluster->channel(), client::MakeRequest({1, 2, 3}, 3),
                                          absl::Seconds(20));
    EXPECT_TRUE(out.status.ok()) << out.status.error_message();
  }
  ExpectClusterAtBaseline(*cluster);
  std::remove(token_file.c_str());
}

// A worker's identity could be taken over: a decode worker paused long enough to be dropped,
// an impostor registering its id, and the real worker refused ("registered by a live worker")
// for as long as the impostor kept reporting, while requests placed on the impostor's
// black-hole address stalled. Now a registration's address must answer as the worker it claims
// (WorkerIdentity.Identify), and a holder whose address no longer does is replaced by the
// worker that registers the id again.
TEST(RouterFaultTest, AnImpostorCannotTakeAWorkersPlace) {
  auto cluster = LocalCluster::Start(ClusterOptions{.prefill_workers = 0, .decode_workers = 1});
  ASSERT_NE(cluster, nullptr);
  ChildProcess& real = *cluster->decode()[0];
  const absl::StatusOr<WorkerRegistration> registered =
      wire::RegistrationFromProto(cluster->Status().workers(0).registration());
  ASSERT_TRUE(registered.ok()) << registered.status();
  auto start_impostor = [&](const std::string& address, uint64_t epoch) {
    WorkerRegistration fake = *registered;
    fake.grpc_address = address;
    fake.epoch = epoch;
    auto client = std::make_unique<RegistryClient>(
        RegistryClientConfig{.router_address = cluster->registry_address(),
                             .min_backoff = absl::Milliseconds(20),
                             .max_backoff = absl::Milliseconds(100)},
        fake, [](bool, auto*, auto*) {});
    client->Start();
    return client;
  };
  auto registered_at = [&](const std::string& address) {
    return [&, address](const v1::ClusterStatus& s) {
      return s.workers_size() == 1 && s.workers(0).registration().grpc_address() == address;
    };
  };
  // The real worker stops answering and is dropped.
  ASSERT_EQ(kill(real.pid(), SIGSTOP), 0);
  ASSERT_TRUE(
      cluster->WaitForStatus([](const v1::ClusterStatus& s) { return s.workers_size() == 0; }));
  // Its id with an address nobody answers at, or with its own (stopped) address: refused.
  for (const std::string& address : {std::string("127.0.0.1:1"), registered->grpc_address}) {
    auto impostor = start_impostor(address, 777);
    EXPECT_TRUE(PollUntil([&] { return !impostor->last_error().empty(); }, absl::Seconds(10)));
    impostor->Stop();
    EXPECT_EQ(impostor->registrations(), 0) << address;
    EXPECT_TRUE(absl::StrContains(impostor->last_error(), "did not answer as worker"))
        << impostor->last_error();
  }
  // An impostor that does answer at its own address takes the id...
  WorkerIdentityService identity;
  identity.Set(registered->worker_id, 777);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&identity);
  std::unique_ptr<grpc::Server> impostor_server = builder.BuildAndStart();
  ASSERT_NE(impostor_server, nullptr);
  const std::string impostor_address = absl::StrCat("127.0.0.1:", port);
  auto impostor = start_impostor(impostor_address, 777);
  ASSERT_TRUE(cluster->WaitForStatus(registered_at(impostor_address)))
      << cluster->Status().DebugString();
  // ...and keeps reporting, but stops answering there. The real worker comes back and takes
  // its id back at once, however long the impostor goes on reporting.
  impostor_server->Shutdown();
  impostor_server.reset();
  const absl::Time resumed = absl::Now();
  ASSERT_EQ(kill(real.pid(), SIGCONT), 0);
  ASSERT_TRUE(cluster->WaitForStatus(registered_at(registered->grpc_address), absl::Seconds(10)))
      << cluster->Status().DebugString() << real.Log();
  EXPECT_LT(absl::Now() - resumed, absl::Seconds(5));
  EXPECT_TRUE(absl::StrContains(cluster->router().Log(), "no longer answers at its address"))
      << cluster->router().Log();
  // Its retries are refused; requests go to the real worker.
  for (int i = 0; i < 4; ++i) {
    const auto out = client::CallGenerate(cluster->channel(), client::MakeRequest({1, 2, 3}, 3),
                                          absl::Seconds(20));
    EXPECT_TRUE(out.status.ok()) << out.status.error_message();
    EXPECT_EQ(out.result.placement().decode_worker_id(), registered->worker_id);
  }
  EXPECT_TRUE(PollUntil(
      [&] { return absl::StrContains(impostor->last_error(), "did not answer as worker"); },
      absl::Seconds(10)))
      << impostor->last_error();
  impostor->Stop();
  ExpectClusterAtBaseline(*cluster);
}

// 1,000 fake workers once registered from one host. One peer address now holds at most
// --max_workers_per_peer live registrations; past it a registration is refused naming the flag.
TEST(RouterFaultTest, OnePeerHoldsAtMostItsShareOfRegistrations) {
  auto cluster = LocalCluster::Start(ClusterOptions{
      .prefill_workers = 0, .decode_workers = 1, .router_flags = {"--max_workers_per_peer=1"}});
  ASSERT_NE(cluster, nullptr);
  absl::StatusOr<WorkerRegistration> another =
      wire::RegistrationFromProto(cluster->Status().workers(0).registration());
  ASSERT_TRUE(another.ok()) << another.status();
  another->worker_id = "decode-another";
  RegistryClient client(RegistryClientConfig{.router_address = cluster->registry_address(),
                                             .min_backoff = absl::Milliseconds(20),
                                             .max_backoff = absl::Milliseconds(100)},
                        *another, [](bool, auto*, auto*) {});
  client.Start();
  EXPECT_TRUE(PollUntil([&] { return !client.last_error().empty(); }, absl::Seconds(10)));
  client.Stop();
  EXPECT_EQ(client.registrations(), 0);
  EXPECT_TRUE(absl::StrContains(client.last_error(), "--max_workers_per_peer"))
      << client.last_error();
  EXPECT_EQ(cluster->Status().workers_size(), 1);
  ExpectClusterAtBaseline(*cluster);
}

}  // namespace
}  // namespace pdserve::testing
