#include "server/registry_client.h"

#include <arpa/inet.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <netdb.h>

#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/status_macros.h"
#include "pdserve/v1/registry.grpc.pb.h"
#include "server/grpc_channel.h"
#include "wire/report_bridge.h"

namespace pdserve {
namespace {

// Reports queued for one router before it counts as behind: its queue is dropped and it waits
// for a full prefix resync (5 s at the default interval).
constexpr size_t kMaxQueuedReports = 50;
constexpr absl::Duration kRegistryKeepalive = absl::Seconds(10);

bool IsIpLiteral(const std::string& host) {
  in6_addr v6;
  in_addr v4;
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

}  // namespace

namespace {

// The addresses of one host:port.
absl::StatusOr<std::set<std::string>> ResolveOne(absl::string_view host_port) {
  ASSIGN_OR_RETURN(HostPort address, ParseHostPort(host_port, "router address"));
  if (IsIpLiteral(address.host)) return std::set<std::string>{address.ToString()};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(address.host.c_str(), nullptr, &hints, &found);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("router address: cannot resolve '", address.host, "': ", gai_strerror(rc)));
  }
  std::set<std::string> v4, v6;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr, text,
                sizeof(text));
      v4.insert(HostPort{text, address.port}.ToString());
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr, text,
                sizeof(text));
      v6.insert(HostPort{text, address.port}.ToString());
    }
  }
  freeaddrinfo(found);
  if (v4.empty() && v6.empty()) {
    return absl::UnavailableError(
        absl::StrCat("router address: '", address.host, "' has no IPv4 or IPv6 address"));
  }
  return v4.empty() ? v6 : v4;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolveRouterAddresses(const std::string& addresses) {
  std::set<std::string> all;
  for (absl::string_view one : absl::StrSplit(addresses, ',', absl::SkipWhitespace())) {
    ASSIGN_OR_RETURN(std::set<std::string> found, ResolveOne(absl::StripAsciiWhitespace(one)));
    all.insert(found.begin(), found.end());
  }
  if (all.empty()) return absl::InvalidArgumentError("router address: empty");
  return std::vector<std::string>(all.begin(), all.end());
}

// The stream to one router, reconnected with backoff until stopped.
class RegistryClient::RouterSession {
 public:
  RouterSession(RegistryClient* client, std::string address, GrpcSecurity security)
      : client_(client), address_(std::move(address)), security_(std::move(security)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~RouterSession() {
    Stop();
    thread_.join();
  }
  void Stop() {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    if (active_context_ != nullptr) active_context_->TryCancel();
  }
  // Queues a report while registered; a router that fell behind drops its queue and waits
  // for a resync.
  void Offer(const std::shared_ptr<const Report>& report) {
    bool behind = false;
    {
      absl::MutexLock lock(&mu_);
      if (!registered_) return;
      if (queue_.size() >= kMaxQueuedReports) {
        queue_.clear();
        awaiting_reset_ = true;
        behind = true;
      }
      queue_.push_back(report);
    }
    if (behind) {
      PDS_LOG_EVERY_N_SEC(WARNING, 10) << "router " << address_ << " fell behind the load "
                                       << "reports; resyncing its prefix view";
      client_->RequestReset();
    }
  }

 private:
  bool stopping() {
    absl::MutexLock lock(&mu_);
    return stop_;
  }

  void Run() {
    const RegistryClientConfig& config = client_->config_;
    absl::Duration backoff = config.min_backoff;
    while (!stopping()) {
      const absl::Time start = absl::Now();
      Session();
      // A session that lasted a while resets the backoff.
      if (absl::Now() - start > config.max_backoff) backoff = config.min_backoff;
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), backoff);
      backoff = std::min(backoff * 2, config.max_backoff);
    }
  }

  // One connection's lifetime; returns when the stream broke or Stop() was called.
  void Session() {
    // Keepalive: a router cut off by the network is left (and the worker's readiness and
    // gauge say so) within about 15 s, not when TCP gives up minutes later.
    auto channel = MakeChannel(address_, security_, kRegistryKeepalive);
    auto stub = v1::Registry::NewStub(channel);
    grpc::ClientContext context;
    if (!client_->config_.registration_token.empty()) {
      context.AddMetadata(kRegistrationTokenHeader, client_->config_.registration_token);
    }
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      active_context_ = &context;
    }
    auto stream = stub->Connect(&context);
    v1::WorkerMessage hello;
    *hello.mutable_registration() = client_->registration_;
    v1::RouterMessage reply;
    // A stream whose write or read failed is over: its status says why. One that answered
    // but not as expected is still open and must be cancelled.
    const bool answered = stream->Write(hello) && stream->Read(&reply);
    bool ok = answered && reply.has_ack();
    if (ok && !reply.ack().accepted()) {
      PDS_LOG_EVERY_N_SEC(WARNING, 10)
          << "router " << address_ << " refused registration: " << reply.ack().message();
      ok = false;
    }
    if (ok) {
      {
        absl::MutexLock lock(&mu_);
        registered_ = true;
        awaiting_reset_ = true;
      }
      const absl::Duration heartbeat = absl::Milliseconds(reply.ack().heartbeat_interval_ms());
      PDS_LOG(INFO) << "registered with router " << address_ << " as "
                    << client_->registration_.worker_id();
      client_->SessionRegistered(true);
      // Drain router messages in the background so the stream's read side never stalls.
      std::thread reader([this, &stream] {
        v1::RouterMessage m;
        while (stream->Read(&m)) {
          if (m.has_switch_role() && client_->config_.on_role_switch) {
            client_->config_.on_role_switch(m.switch_role(), address_);
          }
        }
      });
      Forward(stream.get(), heartbeat);
      {
        absl::MutexLock lock(&mu_);
        registered_ = false;
        queue_.clear();
      }
      client_->SessionRegistered(false);
      PDS_LOG(INFO) << "left router " << address_;
      context.TryCancel();
      reader.join();
    }
    const bool refused = !ok && reply.has_ack();  // Said and logged above.
    if (!ok && answered) context.TryCancel();
    {
      absl::MutexLock lock(&mu_);
      active_context_ = nullptr;
    }
    const grpc::Status finished = stream->Finish();
    if (!ok && !stopping()) {
      // A worker that cannot register once said nothing: the router unreachable, TLS
      // refused, or --router pointing at a listener without the registry (UNIMPLEMENTED).
      std::string why =
          refused
              ? absl::StrCat("router ", address_, " refused registration: ", reply.ack().message())
              : absl::StrCat(
                    "cannot register with router ", address_, ": ",
                    absl::StatusCodeToString(static_cast<absl::StatusCode>(finished.error_code())),
                    ": ", finished.error_message());
      if (finished.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
        absl::StrAppend(&why, " (does --registration_token_file hold the router's token?)");
      }
      if (finished.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        absl::StrAppend(&why,
                        " (is --router the router's registry listener, its --registry_listen?)");
      }
      if (!refused) PDS_LOG_EVERY_N_SEC(WARNING, 10) << why;
      client_->RegistrationFailed(why);
    }
  }

  // A report's load as compared between reports: without its sequence and step samples.
  static v1::LoadReport LoadOnly(const v1::LoadReport& report) {
    v1::LoadReport load = report;
    load.clear_sequence();
    load.clear_recent_steps();
    return load;
  }

  // Writes queued reports until the stream breaks or the session stops. A report that says
  // nothing new (no step samples, no prefix events, the last written LoadOnly) is skipped
  // unless `heartbeat` has passed since the last one written (zero: none is skipped).
  void Forward(grpc::ClientReaderWriter<v1::WorkerMessage, v1::RouterMessage>* stream,
               absl::Duration heartbeat) {
    const absl::Duration idle_check = client_->config_.report_interval * 10;
    std::optional<v1::LoadReport> last_written;  // LoadOnly.
    absl::Time last_write = absl::InfinitePast();
    while (true) {
      std::shared_ptr<const Report> report;
      bool send_events;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
        mu_.AwaitWithTimeout(absl::Condition(&ready), idle_check);
        if (stop_) return;
        if (queue_.empty()) continue;
        report = std::move(queue_.front());
        queue_.pop_front();
        const v1::PrefixCacheEvents& e = report->events.prefix_cache();
        if (e.reset()) awaiting_reset_ = false;
        send_events =
            !awaiting_reset_ && (e.reset() || e.stored_size() > 0 || e.evicted_size() > 0);
      }
      const absl::Time now = absl::Now();
      const v1::LoadReport& load = report->load.load();
      if (!send_events && load.recent_steps_size() == 0 && last_written &&
          now - last_write < heartbeat &&
          google::protobuf::util::MessageDifferencer::Equals(*last_written, LoadOnly(load))) {
        continue;
      }
      if (!stream->Write(report->load)) return;
      last_written = LoadOnly(load);
      last_write = now;
      if (send_events && !stream->Write(report->events)) return;
    }
  }

  RegistryClient* const client_;
  const std::string address_;
  const GrpcSecurity security_;
  std::thread thread_;
  absl::Mutex mu_;
  std::deque<std::shared_ptr<const Report>> queue_ ABSL_GUARDED_BY(mu_);
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  // Prefix events wait for a full resync after (re)registering or falling behind.
  bool awaiting_reset_ ABSL_GUARDED_BY(mu_) = true;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_context_ ABSL_GUARDED_BY(mu_) = nullptr;
};

namespace {

v1::WorkerRegistration ToWire(const WorkerRegistration& registration) {
  v1::WorkerRegistration out;
  wire::RegistrationToProto(registration, &out);
  return out;
}

}  // namespace

RegistryClient::RegistryClient(RegistryClientConfig config, const WorkerRegistration& registration,
                               ReportFn report)
    : config_(std::move(config)), registration_(ToWire(registration)), report_(std::move(report)) {}

RegistryClient::~RegistryClient() { Stop(); }

void RegistryClient::Start() {
  if (config_.router_address.empty()) return;
  resolver_ = std::thread([this] { Run(); });
  reporter_ = std::thread([this] { RunReporter(); });
}

void RegistryClient::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  {
    absl::MutexLock lock(&mu_);
    for (auto& [address, session] : sessions_) session->Stop();
  }
  if (reporter_.joinable()) reporter_.join();
  if (resolver_.joinable()) resolver_.join();
}

void RegistryClient::Run() {
  // The name the routers' certificates are checked against: the (first) host named.
  const std::string first(absl::StripAsciiWhitespace(
      std::vector<absl::string_view>(absl::StrSplit(config_.router_address, ','))[0]));
  auto parsed = ParseHostPort(first, "router address");
  const std::string host = parsed.ok() ? parsed->host : "";
  // Routers reached at their IPs still prove the name the worker was given (unless
  // --tls_server_name names another).
  const GrpcSecurity security =
      IsIpLiteral(host) ? config_.security : config_.security.WithDefaultServerName(host);
  size_t last_count = 0;
  do {
    auto addresses = ResolveRouterAddresses(config_.router_address);
    std::vector<std::unique_ptr<RouterSession>> removed;
    if (!addresses.ok()) {
      // Keep the routers we have: a failed lookup is no news about them.
      PDS_LOG_EVERY_N_SEC(WARNING, 30) << addresses.status().message();
    } else {
      const std::set<std::string> wanted(addresses->begin(), addresses->end());
      absl::MutexLock lock(&mu_);
      for (auto it = sessions_.begin(); it != sessions_.end();) {
        if (wanted.count(it->first) == 0) {
          it->second->Stop();
          removed.push_back(std::move(it->second));
          it = sessions_.erase(it);
        } else {
          ++it;
        }
      }
      for (const std::string& address : wanted) {
        if (sessions_.count(address) == 0 && !stop_.HasBeenNotified()) {
          sessions_[address] = std::make_unique<RouterSession>(this, address, security);
        }
      }
      if (sessions_.size() != last_count && wanted.size() > 1) {
        PDS_LOG(INFO) << config_.router_address << " stands for " << sessions_.size() << " routers";
      }
      last_count = sessions_.size();
    }
    removed.clear();  // Joins their threads, outside the lock.
  } while (!stop_.WaitForNotificationWithTimeout(config_.resolve_interval));
  std::map<std::string, std::unique_ptr<RouterSession>> sessions;
  {
    absl::MutexLock lock(&mu_);
    sessions.swap(sessions_);
  }
  for (auto& [address, session] : sessions) session->Stop();
}

void RegistryClient::RunReporter() {
  uint64_t sequence = 0;
  while (!stop_.WaitForNotificationWithTimeout(config_.report_interval)) {
    if (registered_routers_.load() == 0) continue;  // Nobody to tell; keep the samples.
    WorkerReport taken;
    PrefixCacheChanges prefix;
    report_(reset_requested_.exchange(false), &taken, &prefix);
    taken.load.sequence = ++sequence;
    auto report = std::make_shared<Report>();
    wire::ReportToProto(taken, report->load.mutable_load());
    v1::PrefixCacheEvents* events = report->events.mutable_prefix_cache();
    events->set_reset(prefix.reset);
    for (uint64_t h : prefix.stored) events->add_stored(h);
    for (uint64_t h : prefix.evicted) events->add_evicted(h);
    absl::MutexLock lock(&mu_);
    for (auto& [address, session] : sessions_) session->Offer(report);
  }
}

void RegistryClient::RequestReset() { reset_requested_.store(true); }

void RegistryClient::RegistrationFailed(const std::string& why) {
  absl::MutexLock lock(&error_mu_);
  last_error_ = why;
}

std::string RegistryClient::last_error() const {
  absl::MutexLock lock(&error_mu_);
  return last_error_;
}

void RegistryClient::SessionRegistered(bool registered) {
  if (registered) {
    registrations_.fetch_add(1);
    RequestReset();
  }
  const int now = registered_routers_.fetch_add(registered ? 1 : -1) + (registered ? 1 : -1);
  if (now == 0) {
    PDS_LOG(WARNING) << "not registered with any router (" << config_.router_address
                     << "); retrying";
  }
  absl::MutexLock lock(&callback_mu_);
  if (config_.on_registered_routers) config_.on_registered_routers(registered_routers_.load());
}

}  // namespace pdserve
