// A worker's connections to the routers' Registry. The router address names one router, or
// several (a comma-separated list, or a name with several addresses): a host name is resolved to
// every address it has (IPv4 ones when there are any, so that a dual-stack name does not count each
// router twice), and re-resolved every resolve_interval, so a worker behind a headless Service
// registers with every router replica, joins new ones and leaves removed ones.
//
// With each router: one bidirectional stream for the worker's lifetime; the registration
// first, then a load report about every report_interval (with prefix-cache events for decode
// workers). When a stream breaks it reconnects with exponential backoff and registers again
// (that router then expects a full prefix resync).
//
// One reporter calls the worker's ReportFn once per interval and hands the same report to
// every router: step samples and prefix-cache events are consumed when taken, so each router
// must get every one of them. A router that just (re)registered (or fell behind) sends no
// prefix events until a full resync (reset) comes round; load reports flow at once.
//
// Without a router address it does nothing: workers run standalone.
// Thread-safety: Start/Stop from one thread; the callbacks run on the client's threads, one
// at a time.
#ifndef PDSERVE_SERVER_REGISTRY_CLIENT_H_
#define PDSERVE_SERVER_REGISTRY_CLIENT_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/worker_reports.h"
#include "pdserve/v1/registry.pb.h"
#include "server/grpc_security.h"

namespace grpc {
class ClientContext;
}

namespace pdserve {

struct RegistryClientConfig {
  // The routers' Registry addresses, host:port[,host:port...] (a name may stand for several
  // routers). Empty: do not register.
  std::string router_address;
  // How often to send load reports. Default 100 ms.
  absl::Duration report_interval = absl::Milliseconds(100);
  // Backoff between reconnection attempts: starts at min, doubles up to max.
  absl::Duration min_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  // How often a host name is resolved again (routers come and go). Default 5 s.
  absl::Duration resolve_interval = absl::Seconds(5);
  // How the stream is secured (the worker's TLS identity); plaintext by default.
  GrpcSecurity security;
  // The cluster's registration token (--registration_token_file), sent as the
  // kRegistrationTokenHeader metadata of every registration; empty: none sent.
  std::string registration_token;
  // Called with the number of routers this worker is registered with, whenever it changes.
  std::function<void(int registered_routers)> on_registered_routers;
  // Called when a router orders a role change (workers registered with role_switching), from
  // the client's threads: it must not block, nor stop this client.
  std::function<void(const v1::RoleSwitch& order, const std::string& router)> on_role_switch;
};

// Every address `addresses` (host:port[,host:port...]) stands for, as sorted host:port strings
// without repeats: an IP literal is itself; a name resolves to its IPv4 addresses, or its IPv6
// ones when it has none. Errors: a malformed entry (INVALID_ARGUMENT), a name that does not
// resolve (UNAVAILABLE).
absl::StatusOr<std::vector<std::string>> ResolveRouterAddresses(const std::string& addresses);

// The metadata key a worker's registration carries the cluster's token in.
inline constexpr char kRegistrationTokenHeader[] = "x-pdserve-registration-token";

class RegistryClient {
 public:
  // Fills one report, in domain terms (converted to the wire once, here). `reconnected` is
  // true when a router (re)registered since the last call: a decode worker then prepares its
  // full prefix cache (`prefix->reset` in a later report, once built). A prefill worker leaves
  // `prefix` empty.
  using ReportFn =
      std::function<void(bool reconnected, WorkerReport* report, PrefixCacheChanges* prefix)>;

  // `registration` is converted to the wire once, here.
  RegistryClient(RegistryClientConfig config, const WorkerRegistration& registration,
                 ReportFn report);
  ~RegistryClient();

  void Start();
  void Stop();
  // Whether the worker is registered with at least one router.
  bool connected() const { return registered_routers_.load() > 0; }
  int registered_routers() const { return registered_routers_.load(); }
  // Successful registrations so far, over every router.
  int registrations() const { return registrations_.load(); }
  // Why the last registration attempt that failed did (router address, gRPC status and a
  // hint); empty while none has. Also logged, at most every 10 s per router.
  std::string last_error() const;

 private:
  class RouterSession;
  struct Report {
    v1::WorkerMessage load;
    v1::WorkerMessage events;
  };

  // Resolves the router address and keeps one session per address.
  void Run();
  // Calls report_ every report_interval and hands the result to every session.
  void RunReporter();
  void SessionRegistered(bool registered);
  void RegistrationFailed(const std::string& why);
  void RequestReset();

  const RegistryClientConfig config_;
  const v1::WorkerRegistration registration_;
  const ReportFn report_;
  std::thread resolver_;
  std::thread reporter_;
  absl::Notification stop_;
  std::atomic<int> registered_routers_{0};
  std::atomic<int> registrations_{0};
  std::atomic<bool> reset_requested_{false};

  absl::Mutex mu_;
  // By address; only the resolver thread adds or removes.
  std::map<std::string, std::unique_ptr<RouterSession>> sessions_ ABSL_GUARDED_BY(mu_);
  absl::Mutex callback_mu_;  // One on_registered_routers call at a time.
  mutable absl::Mutex error_mu_;
  std::string last_error_ ABSL_GUARDED_BY(error_mu_);
};

}  // namespace pdserve

#endif  // PDSERVE_SERVER_REGISTRY_CLIENT_H_
