#include "common/registry_client.h"

#include <grpcpp/grpcpp.h>

#include "absl/time/clock.h"
#include "common/grpc_channel.h"
#include "common/logging.h"
#include "pdserve/v1/registry.grpc.pb.h"

namespace pdserve {

RegistryClient::RegistryClient(RegistryClientConfig config, v1::WorkerRegistration registration,
                               ReportFn report)
    : config_(std::move(config)),
      registration_(std::move(registration)),
      report_(std::move(report)) {}

RegistryClient::~RegistryClient() { Stop(); }

void RegistryClient::Start() {
  if (config_.router_address.empty()) return;
  thread_ = std::thread([this] { Run(); });
}

void RegistryClient::Stop() {
  stop_.store(true);
  {
    absl::MutexLock lock(&mu_);
    if (active_context_ != nullptr) active_context_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

void RegistryClient::Run() {
  absl::Duration backoff = config_.min_backoff;
  while (!stop_.load()) {
    const absl::Time start = absl::Now();
    Session();
    if (stop_.load()) break;
    // A session that lasted a while resets the backoff.
    if (absl::Now() - start > config_.max_backoff) backoff = config_.min_backoff;
    const absl::Time wake = absl::Now() + backoff;
    while (!stop_.load() && absl::Now() < wake) absl::SleepFor(absl::Milliseconds(20));
    backoff = std::min(backoff * 2, config_.max_backoff);
  }
}

void RegistryClient::Session() {
  auto channel = MakeChannel(config_.router_address, config_.security);
  auto stub = v1::Registry::NewStub(channel);
  grpc::ClientContext context;
  {
    absl::MutexLock lock(&mu_);
    if (stop_.load()) return;
    active_context_ = &context;
  }
  auto stream = stub->Connect(&context);
  v1::WorkerMessage hello;
  *hello.mutable_registration() = registration_;
  v1::RouterMessage reply;
  bool ok = stream->Write(hello) && stream->Read(&reply) && reply.has_ack();
  if (ok && !reply.ack().accepted()) {
    PDS_LOG_EVERY_N_SEC(WARNING, 10) << "router refused registration: " << reply.ack().message();
    ok = false;
  }
  if (ok) {
    connected_.store(true);
    registrations_.fetch_add(1);
    PDS_LOG(INFO) << "registered with router " << config_.router_address << " as "
                  << registration_.worker_id();
    // Drain router messages in the background so the stream's read side never stalls.
    std::thread reader([&stream] {
      v1::RouterMessage m;
      while (stream->Read(&m)) {
      }
    });
    bool first = true;
    uint64_t sequence = 0;
    while (!stop_.load()) {
      v1::WorkerMessage load;
      v1::WorkerMessage events;
      report_(first, load.mutable_load(), events.mutable_prefix_cache());
      load.mutable_load()->set_sequence(++sequence);
      if (!stream->Write(load)) break;
      const v1::PrefixCacheEvents& e = events.prefix_cache();
      if (e.reset() || e.stored_size() > 0 || e.evicted_size() > 0) {
        if (!stream->Write(events)) break;
      }
      first = false;
      absl::SleepFor(config_.report_interval);
    }
    connected_.store(false);
    context.TryCancel();
    reader.join();
  }
  if (!ok) context.TryCancel();
  {
    absl::MutexLock lock(&mu_);
    active_context_ = nullptr;
  }
  stream->Finish();
}

}  // namespace pdserve
