// A worker's connection to the router's Registry: one bidirectional stream for the worker's
// lifetime; the registration first, then a load report about every report_interval (with
// prefix-cache events for decode workers). When the stream breaks it reconnects with
// exponential backoff and registers again (the router then expects a full prefix resync).
// Without a router address it does nothing: workers run standalone.
// Thread-safety: Start/Stop from one thread; the callbacks run on the client's thread.
#ifndef PDSERVE_COMMON_REGISTRY_CLIENT_H_
#define PDSERVE_COMMON_REGISTRY_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_security.h"
#include "pdserve/v1/registry.pb.h"

namespace grpc {
class ClientContext;
}

namespace pdserve {

struct RegistryClientConfig {
  // The router's Registry address, host:port. Empty: do not register.
  std::string router_address;
  // How often to send load reports. Default 100 ms.
  absl::Duration report_interval = absl::Milliseconds(100);
  // Backoff between reconnection attempts: starts at min, doubles up to max.
  absl::Duration min_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  // How the stream is secured (the worker's TLS identity); plaintext by default.
  GrpcSecurity security;
};

class RegistryClient {
 public:
  // Fills one report. `reconnected` is true for the first report after (re)registering: a
  // decode worker then sends its full prefix cache (prefix_cache.reset = true).
  using ReportFn =
      std::function<void(bool reconnected, v1::LoadReport* load, v1::PrefixCacheEvents* events)>;

  RegistryClient(RegistryClientConfig config, v1::WorkerRegistration registration, ReportFn report);
  ~RegistryClient();

  void Start();
  void Stop();
  bool connected() const { return connected_.load(); }
  int registrations() const { return registrations_.load(); }

 private:
  void Run();
  // One connection's lifetime; returns when the stream broke or Stop() was called.
  void Session();

  RegistryClientConfig config_;
  v1::WorkerRegistration registration_;
  ReportFn report_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> connected_{false};
  std::atomic<int> registrations_{0};
  absl::Mutex mu_;
  grpc::ClientContext* active_context_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace pdserve

#endif  // PDSERVE_COMMON_REGISTRY_CLIENT_H_
