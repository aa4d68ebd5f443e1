#include "kvtransfer/testing/host_block_copier.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::kvtransfer {

HostBlockCopier::HostBlockCopier(PoolView device, PoolView host)
    : device_(std::move(device)), host_(std::move(host)) {
  worker_ = std::thread([this] { Run(); });
}

HostBlockCopier::~HostBlockCopier() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  worker_.join();
}

absl::StatusOr<uint64_t> HostBlockCopier::DeviceToHost(int layer,
                                                       absl::Span<const int32_t> device_blocks,
                                                       absl::Span<const int32_t> host_blocks) {
  ASSIGN_OR_RETURN(auto copies, PlanRegionCopies(device_.layout, host_.layout, layer, 1,
                                                 device_blocks, host_blocks));
  return Enqueue(/*to_host=*/true, std::move(copies));
}

absl::StatusOr<uint64_t> HostBlockCopier::HostToDevice(absl::Span<const int32_t> host_blocks,
                                                       absl::Span<const int32_t> device_blocks) {
  ASSIGN_OR_RETURN(auto copies,
                   PlanRegionCopies(device_.layout, host_.layout, 0, device_.layout.num_layers,
                                    device_blocks, host_blocks));
  return Enqueue(/*to_host=*/false, std::move(copies));
}

absl::StatusOr<uint64_t> HostBlockCopier::Enqueue(bool to_host, std::vector<RegionCopy> copies) {
  absl::MutexLock lock(&mu_);
  const uint64_t ticket = next_ticket_++;
  jobs_.push_back({ticket, to_host, std::move(copies), fail_next_});
  fail_next_ = absl::OkStatus();
  return ticket;
}

void HostBlockCopier::Run() {
  while (true) {
    Job job;
    absl::Duration delay;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](HostBlockCopier* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
            return c->stop_ || (!c->held_ && !c->jobs_.empty());
          },
          this));
      if (stop_ && jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      delay = delay_;
    }
    absl::SleepFor(delay);
    if (job.fail.ok()) CopyRegionsInHostMemory(job.copies, device_.base, host_.base, job.to_host);
    absl::MutexLock lock(&mu_);
    if (!job.fail.ok() && first_error_.ok()) {
      first_error_ = job.fail;
      first_error_ticket_ = job.ticket;
    }
    completed_ = job.ticket;
  }
}

absl::Status HostBlockCopier::Wait(uint64_t ticket, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  struct Args {
    HostBlockCopier* self;
    uint64_t ticket;
  } args{this, ticket};
  const bool done = mu_.AwaitWithTimeout(
      absl::Condition(
          +[](Args* a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->self->completed_ >= a->ticket; },
          &args),
      timeout);
  if (!done) return absl::DeadlineExceededError(absl::StrCat("copy ", ticket, " still running"));
  if (!first_error_.ok() && first_error_ticket_ <= ticket) return first_error_;
  return absl::OkStatus();
}

void HostBlockCopier::set_delay(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  delay_ = delay;
}

void HostBlockCopier::FailNextCopy(absl::Status status) {
  absl::MutexLock lock(&mu_);
  fail_next_ = std::move(status);
}

void HostBlockCopier::Hold() {
  absl::MutexLock lock(&mu_);
  held_ = true;
}

void HostBlockCopier::Resume() {
  absl::MutexLock lock(&mu_);
  held_ = false;
}

int HostBlockCopier::queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(jobs_.size());
}

uint64_t HostBlockCopier::completed() const {
  absl::MutexLock lock(&mu_);
  return completed_;
}

}  // namespace pdserve::kvtransfer
