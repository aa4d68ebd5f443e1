// A whole local cluster of real processes for end-to-end tests: one pdserve-router, prefill
// workers and decode workers on the tiny model, all on 127.0.0.1 with ephemeral ports,
// registered with the router before the test starts, and stopped with the fixture.
#ifndef PDSERVE_TESTS_ROUTER_CLUSTER_FIXTURE_H_
#define PDSERVE_TESTS_ROUTER_CLUSTER_FIXTURE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "pdserve/v1/decode.grpc.pb.h"
#include "pdserve/v1/generation.grpc.pb.h"
#include "pdserve/v1/registry.grpc.pb.h"
#include "server/child_process.h"
#include "server/grpc_security.h"

namespace pdserve::testing {

struct ClusterOptions {
  std::string model = "tiny";
  int prefill_workers = 1;
  int decode_workers = 2;
  std::vector<std::string> router_flags;
  std::vector<std::string> decode_flags;
  std::vector<std::string> prefill_flags;
  // The router's open-file limit (soft and hard); 0: inherited.
  int64_t router_max_open_files = 0;
  // How the test's own calls (and health checks) reach the processes: plaintext unless the
  // flags above turn TLS on, when this must match them.
  GrpcSecurity security;
};

class LocalCluster {
 public:
  // Starts everything and waits until every worker has registered and reported.
  static std::unique_ptr<LocalCluster> Start(const ClusterOptions& options);

  ChildProcess& router() { return *router_; }
  std::vector<std::unique_ptr<ChildProcess>>& decode() { return decode_; }
  std::vector<std::unique_ptr<ChildProcess>>& prefill() { return prefill_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  // Where workers register and status is read (the router's registry listener, if any).
  std::string registry_address() const { return router_->internal_grpc_address(); }

  v1::ClusterStatus Status(uint32_t max_decisions = 20) const;
  // Waits until the router lists exactly these many workers of each role, all reported.
  bool WaitForWorkers(int decode, int prefill, absl::Duration timeout) const;
  // Waits until the router's status satisfies `done` (what a test would otherwise sleep for:
  // load reports or prefix-cache events reaching the router).
  bool WaitForStatus(const std::function<bool(const v1::ClusterStatus&)>& done,
                     absl::Duration timeout = absl::Seconds(10)) const;
  // A decode worker's stats, straight from it.
  static v1::DecodeStats DecodeStats(const ChildProcess& worker,
                                     const GrpcSecurity& security = GrpcSecurity());
  // Waits until a decode worker runs nothing and all its blocks are free or cached.
  static bool WaitForBaseline(const ChildProcess& worker, absl::Duration timeout,
                              const GrpcSecurity& security = GrpcSecurity());
  // The decode worker process whose registered id is `worker_id` (null if none).
  ChildProcess* DecodeById(const std::string& worker_id);
  // Kills the router and starts a new one on the same address with the same flags (the
  // workers reconnect to it by themselves). False if it did not come up.
  bool RestartRouter();

 private:
  std::unique_ptr<ChildProcess> router_;
  std::vector<std::string> router_args_;
  int64_t router_max_open_files_ = 0;
  std::vector<std::unique_ptr<ChildProcess>> decode_;
  std::vector<std::unique_ptr<ChildProcess>> prefill_;
  std::shared_ptr<grpc::Channel> channel_;
  GrpcSecurity security_;
};

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_ROUTER_CLUSTER_FIXTURE_H_
