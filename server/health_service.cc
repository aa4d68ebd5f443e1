#include "server/health_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pdserve {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch stream. The service pins a watcher while it updates it outside the service's
// lock; the watcher deletes itself once gRPC is done with it and no update holds a pin.
class HealthService::Watcher final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* service, std::string name) : service_(service), name_(std::move(name)) {}
  const std::string& name() const { return name_; }

  void Pin() {
    absl::MutexLock lock(&mu_);
    ++pins_;
  }
  // Queues `status` (the latest wins), or the end of the stream; then drops a pin.
  void Update(ServingStatus status, bool finish) {
    bool apply;
    {
      absl::MutexLock lock(&mu_);
      apply = !finish_requested_ || finish;  // Nothing but the end after the end.
      if (apply) {
        pending_ = status;
        has_pending_ = true;
        finish_requested_ |= finish;
      }
    }
    if (apply) Advance();
    Unpin();
  }
  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) {
        finish_requested_ = true;
        has_pending_ = false;
      }
    }
    Advance();
  }
  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      finish_requested_ = true;
      has_pending_ = false;
      cancelled_ = true;
    }
    Advance();
  }
  void OnDone() override {
    service_->Remove(this);
    bool last;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      last = pins_ == 0;
    }
    if (last) delete this;
  }

 private:
  void Unpin() {
    bool last;
    {
      absl::MutexLock lock(&mu_);
      last = --pins_ == 0 && done_;
    }
    if (last) delete this;
  }
  // Starts the next write or the finish, one operation at a time.
  void Advance() {
    bool write = false;
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finished_) return;
      if (has_pending_) {
        out_.set_status(pending_);
        has_pending_ = false;
        writing_ = true;
        write = true;
      } else if (finish_requested_) {
        finished_ = true;
        finish = true;
        status = cancelled_
                     ? grpc::Status::CANCELLED
                     : grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down");
      }
    }
    if (write) StartWrite(&out_);
    if (finish) Finish(status);
  }

  HealthService* const service_;
  const std::string name_;
  absl::Mutex mu_;
  HealthCheckResponse out_;
  ServingStatus pending_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  int pins_ ABSL_GUARDED_BY(mu_) = 0;
};

HealthService::HealthService(const std::vector<std::string>& services) {
  absl::MutexLock lock(&mu_);
  statuses_[""] = HealthCheckResponse::NOT_SERVING;
  for (const std::string& s : services) statuses_[s] = HealthCheckResponse::NOT_SERVING;
  statuses_[kReadiness] = HealthCheckResponse::NOT_SERVING;
  statuses_[kLiveness] = HealthCheckResponse::SERVING;
}

HealthService::~HealthService() = default;

bool HealthService::UpdateStatusesLocked() {
  bool changed = false;
  for (auto& [name, status] : statuses_) {
    bool up = serving_ && !shut_down_;
    if (name == kLiveness) up = true;
    if (name == kReadiness) up = up && ready_;
    const ServingStatus next = up ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
    changed |= next != status;
    status = next;
  }
  return changed;
}

void HealthService::SetServing(bool serving) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    serving_ = serving;
    UpdateStatusesLocked();
  }
  Publish(/*finish=*/false);
}

void HealthService::SetReady(bool ready) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_ || ready_ == ready) return;
    ready_ = ready;
    if (!UpdateStatusesLocked()) return;
  }
  Publish(/*finish=*/false);
}

void HealthService::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    UpdateStatusesLocked();
  }
  Publish(/*finish=*/true);
}

int HealthService::watchers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(watchers_.size());
}

void HealthService::Publish(bool finish) {
  std::vector<std::pair<Watcher*, ServingStatus>> updates;
  {
    absl::MutexLock lock(&mu_);
    for (Watcher* w : watchers_) {
      auto it = statuses_.find(w->name());
      w->Pin();  // Alive until Update returns, even if gRPC is done with it meanwhile.
      updates.emplace_back(
          w, it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN : it->second);
    }
  }
  for (auto& [w, status] : updates) w->Update(status, finish);
}

void HealthService::Remove(Watcher* watcher) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(watcher);
}

std::string HealthService::KnownNames() const {
  std::vector<std::string> names;
  for (const auto& [name, status] : statuses_) {
    if (!name.empty()) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return absl::StrJoin(names, ", ");
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context,
                                               const HealthCheckRequest* request,
                                               HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::MutexLock lock(&mu_);
  auto it = statuses_.find(request->service());
  if (it == statuses_.end()) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND,
                     absl::StrCat("service: '", request->service(),
                                  "' is not served here (known: \"\", ", KnownNames(), ")")));
    return reactor;
  }
  response->set_status(it->second);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request) {
  auto* watcher = new Watcher(this, request->service());
  ServingStatus status;
  bool shut_down;
  {
    absl::MutexLock lock(&mu_);
    auto it = statuses_.find(request->service());
    status = it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN : it->second;
    shut_down = shut_down_;
    watchers_.insert(watcher);
    watcher->Pin();
  }
  watcher->Update(status, shut_down);  // The current status first, as the protocol asks.
  return watcher;
}

}  // namespace pdserve
