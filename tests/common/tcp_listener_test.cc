#include "common/tcp_listener.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/fd_limits.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback_client.h"

namespace pdserve {
namespace {

int OpenDescriptors() {
  int n = 0;
  DIR* dir = opendir("/proc/self/fd");
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n - 3;  // ".", ".." and the directory's own descriptor.
}

// Holds what the listener hands over, as a server keeping its connections open would.
struct Held {
  absl::Mutex mu;
  std::vector<int> fds;
  size_t size() {
    absl::MutexLock lock(&mu);
    return fds.size();
  }
  void CloseAll() {
    absl::MutexLock lock(&mu);
    for (int fd : fds) close(fd);
    fds.clear();
  }
};

bool WaitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 500 && !done(); ++i) usleep(10'000);
  return done();
}

// Whether this build runs under AddressSanitizer (GCC defines the macro, Clang the feature).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

TEST(TcpListenerTest, OutOfDescriptorsItWaitsInsteadOfSpinningAndResumesWhenSomeAreFree) {
  if (kSanitized) {
    // The sanitizers' runtime opens files of its own (UBSan's vptr check reads the process's
    // memory map): out of descriptors it reports false errors. The release build runs this.
    GTEST_SKIP() << "descriptor exhaustion breaks the sanitizer runtime itself";
  }
  auto listener = TcpListener::Bind({.listen_address = "127.0.0.1:0"});
  ASSERT_TRUE(listener.ok()) << listener.status();
  std::vector<int> clients;
  for (int i = 0; i < 20; ++i)
    clients.push_back(testing::ConnectLoopback((*listener)->port()));  // In the backlog.
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  // Room for five more descriptors in this process, then EMFILE.
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(OpenDescriptors() + 5);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
  Held held;
  (*listener)->Start([&held](int fd) {
    absl::MutexLock lock(&held.mu);
    held.fds.push_back(fd);
  });
  EXPECT_TRUE(WaitFor([&] { return (*listener)->stats().accept_errors.load() > 0; }));
  usleep(500'000);
  const int64_t errors = (*listener)->stats().accept_errors.load();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  // A backoff from 10 ms, doubling: a handful of tries in half a second, not a spin.
  EXPECT_LE(errors, 20) << "accept retried at once";
  EXPECT_LT(held.size(), clients.size());  // Some still wait in the backlog.
  // Descriptors are free again: the listener picks up every waiting client by itself.
  EXPECT_TRUE(WaitFor([&] { return held.size() == clients.size(); })) << held.size();
  (*listener)->Stop();
  held.CloseAll();
  for (int fd : clients) close(fd);
}

TEST(TcpListenerTest, ConnectionsPastTheThresholdAreClosedAtOnce) {
  // The next descriptors this process opens: the listener, its eventfd, the client, then the
  // accepted connection. A threshold at the first accepted one refuses every connection.
  const int probe = socket(AF_INET, SOCK_STREAM, 0);
  close(probe);
  auto listener = TcpListener::Bind({.listen_address = "127.0.0.1:0", .refuse_fd_at = probe});
  ASSERT_TRUE(listener.ok()) << listener.status();
  int handed = 0;
  (*listener)->Start([&handed](int fd) {
    ++handed;
    close(fd);
  });
  const int client = testing::ConnectLoopback((*listener)->port());
  char byte = 0;
  EXPECT_EQ(recv(client, &byte, 1, 0), 0) << "the refused connection was not closed";
  EXPECT_EQ((*listener)->stats().refused_fd_headroom.load(), 1);
  (*listener)->Stop();
  EXPECT_EQ(handed, 0);
  close(client);
}

TEST(TcpListenerTest, APortInUseIsNamedAndAStoppedListenerRefuses) {
  auto first = TcpListener::Bind({.listen_address = "127.0.0.1:0", .field = "--listen"});
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = TcpListener::Bind({.listen_address = address, .field = "--listen"});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("--listen: " + address + " is in use"),
            absl::string_view::npos)
      << second.status();
  const int port = (*first)->port();
  (*first)->Start([](int fd) { close(fd); });
  (*first)->Stop();
  const int fd = testing::ConnectLoopback(port);
  EXPECT_EQ(fd, -1) << "a stopped listener accepted a connection";
  if (fd >= 0) close(fd);
}

TEST(FdBudgetTest, ReservesAShareForTheProcessAndASecondForGrpc) {
  const FdBudget small = FdBudget::ForLimit(256);
  EXPECT_EQ(small.reserve, 32);
  EXPECT_EQ(small.grpc_refuse_at(), 224);
  EXPECT_EQ(small.http_refuse_at(), 192);
  EXPECT_EQ(FdBudget::ForLimit(1 << 20).reserve, 4096);
  EXPECT_EQ(FdBudget::ForLimit(64).reserve, 16);  // Half a tiny limit stays for connections.
  auto raised = RaiseFileLimitToHard();
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(*raised, CurrentFileLimit());
}

}  // namespace
}  // namespace pdserve
