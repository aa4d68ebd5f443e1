#include "tests/router/cluster_fixture.h"

#include "gtest/gtest.h"
#include "tests/testing/decode_stats.h"
#include "tests/testing/poll.h"
#include "tests/testing/test_models.h"
#include "tools/client/generation_client.h"

namespace pdserve::testing {
namespace {

std::unique_ptr<ChildProcess> StartChild(const std::string& binary, std::vector<std::string> args,
                                         const GrpcSecurity& security, int64_t max_open_files = 0) {
  auto child = ChildProcess::Start(ChildOptions{.binary = binary,
                                                .args = std::move(args),
                                                .max_open_files = max_open_files,
                                                .security = security});
  EXPECT_TRUE(child.ok()) << binary << ": " << child.status();
  if (!child.ok()) return nullptr;
  EXPECT_TRUE((*child)->WaitHealthy(absl::Seconds(30)).ok()) << (*child)->Log();
  return *std::move(child);
}

}  // namespace

std::unique_ptr<LocalCluster> LocalCluster::Start(const ClusterOptions& options) {
  auto cluster = std::make_unique<LocalCluster>();
  cluster->security_ = options.security;
  const std::string model = TestModelDir(options.model);
  std::vector<std::string> router_args = {"--model=" + model, "--drain_timeout=5s",
                                          "--worker_timeout=1s"};
  router_args.insert(router_args.end(), options.router_flags.begin(), options.router_flags.end());
  cluster->router_args_ = router_args;
  cluster->router_max_open_files_ = options.router_max_open_files;
  cluster->router_ =
      StartChild("pdserve-router", router_args, options.security, options.router_max_open_files);
  if (!cluster->router_) return nullptr;
  const std::string router = "--router=" + cluster->registry_address();
  for (int i = 0; i < options.prefill_workers; ++i) {
    std::vector<std::string> args = {"--model=" + model,
                                     "--threads=1",
                                     "--kv_cache_bytes=67108864",
                                     "--ucx_transports=shm",
                                     "--drain_timeout=5s",
                                     router,
                                     "--worker_id=prefill-" + std::to_string(i)};
    args.insert(args.end(), options.prefill_flags.begin(), options.prefill_flags.end());
    cluster->prefill_.push_back(StartChild("pdserve-prefill", args, options.security));
    if (!cluster->prefill_.back()) return nullptr;
  }
  for (int i = 0; i < options.decode_workers; ++i) {
    std::vector<std::string> args = {"--model=" + model,
                                     "--threads=1",
                                     "--num_blocks=400",
                                     "--max_num_batched_tokens=64",
                                     "--ucx_transports=shm",
                                     "--drain_timeout=5s",
                                     router,
                                     "--worker_id=decode-" + std::to_string(i)};
    args.insert(args.end(), options.decode_flags.begin(), options.decode_flags.end());
    cluster->decode_.push_back(StartChild("pdserve-decode", args, options.security));
    if (!cluster->decode_.back()) return nullptr;
  }
  cluster->channel_ = client::MakeChannel(cluster->router_->grpc_address(), options.security);
  if (!cluster->WaitForWorkers(options.decode_workers, options.prefill_workers,
                               absl::Seconds(20))) {
    ADD_FAILURE() << "workers did not register: " << cluster->Status().DebugString() << "\n"
                  << cluster->router_->Log();
    return nullptr;
  }
  return cluster;
}

v1::ClusterStatus LocalCluster::Status(uint32_t max_decisions) const {
  auto stub = v1::Registry::NewStub(client::MakeChannel(registry_address(), security_));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::ClusterStatusRequest request;
  request.set_max_decisions(max_decisions);
  v1::ClusterStatus status;
  const grpc::Status s = stub->GetClusterStatus(&ctx, request, &status);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return status;
}

bool LocalCluster::WaitForWorkers(int decode, int prefill, absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int d = 0;
    int p = 0;
    bool reported = true;
    const v1::ClusterStatus status = Status();
    for (const v1::WorkerStatus& w : status.workers()) {
      (w.registration().role() == v1::WORKER_ROLE_DECODE ? d : p) += 1;
      reported &= w.load().sequence() > 0;
    }
    if (d == decode && p == prefill && reported) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

bool LocalCluster::WaitForStatus(const std::function<bool(const v1::ClusterStatus&)>& done,
                                 absl::Duration timeout) const {
  return PollUntil([&] { return done(Status()); }, timeout, absl::Milliseconds(20));
}

v1::DecodeStats LocalCluster::DecodeStats(const ChildProcess& worker,
                                          const GrpcSecurity& security) {
  return testing::DecodeStatsOf(worker.grpc_address(), security);
}

bool LocalCluster::WaitForBaseline(const ChildProcess& worker, absl::Duration timeout,
                                   const GrpcSecurity& security) {
  return testing::WaitForDecodeBaseline(worker.grpc_address(), timeout, security);
}

bool LocalCluster::RestartRouter() {
  const std::string address = router_->grpc_address();
  const std::string registry = registry_address();
  router_->Kill();
  router_.reset();
  std::vector<std::string> args = router_args_;
  args.push_back("--listen=" + address);
  if (registry != address) args.push_back("--registry_listen=" + registry);
  router_ = StartChild("pdserve-router", args, security_, router_max_open_files_);
  return router_ != nullptr;
}

ChildProcess* LocalCluster::DecodeById(const std::string& worker_id) {
  for (size_t i = 0; i < decode_.size(); ++i) {
    if (decode_[i] && worker_id == "decode-" + std::to_string(i)) return decode_[i].get();
  }
  return nullptr;
}

}  // namespace pdserve::testing
