#include "kvtransfer/staging/staged_transfer.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::kvtransfer {
namespace {

// A copy that does not complete in this long means a wedged device: the transfer fails.
constexpr absl::Duration kCopyTimeout = absl::Seconds(30);

}  // namespace

StagedOutboundTransfer::StagedOutboundTransfer(std::unique_ptr<OutboundTransfer> inner,
                                               BlockCopier* copier, StagingLease lease)
    : inner_(std::move(inner)), copier_(copier), lease_(std::move(lease)) {
  poster_ = std::thread([this] { PostLoop(); });
}

StagedOutboundTransfer::~StagedOutboundTransfer() {
  uint64_t last = 0;
  bool any = false;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    queue_.clear();
    last = last_ticket_;
    any = any_copy_;
  }
  poster_.join();
  // The staging blocks go back to the pool with the lease: no copy may still be writing them.
  if (any) copier_->Wait(last, kCopyTimeout).IgnoreError();
}

absl::Status StagedOutboundTransfer::WriteLayer(int layer,
                                                absl::Span<const int32_t> source_blocks) {
  if (source_blocks.size() != lease_.blocks().size()) {
    return absl::InvalidArgumentError(absl::StrCat("staged write: ", source_blocks.size(),
                                                   " device blocks for ", lease_.blocks().size(),
                                                   " staging blocks"));
  }
  absl::MutexLock lock(&mu_);
  if (aborted_) return absl::FailedPreconditionError("staged write: the transfer was aborted");
  if (!error_.ok()) return error_;
  ASSIGN_OR_RETURN(const uint64_t ticket,
                   copier_->DeviceToHost(layer, source_blocks, lease_.blocks()));
  last_ticket_ = ticket;
  any_copy_ = true;
  queue_.push_back({layer, ticket});
  return absl::OkStatus();
}

void StagedOutboundTransfer::PostLoop() {
  while (true) {
    PendingLayer next;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](StagedOutboundTransfer* t)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return t->stop_ || !t->queue_.empty(); },
          this));
      if (stop_) return;
      next = queue_.front();
      queue_.pop_front();
      posting_ = true;
    }
    absl::Status status = copier_->Wait(next.ticket, kCopyTimeout);
    bool aborted;
    {
      absl::MutexLock lock(&mu_);
      aborted = aborted_;
    }
    // Aborted while copying: the layer is dropped, never put.
    if (status.ok() && !aborted) status = inner_->WriteLayer(next.layer, lease_.blocks());
    absl::MutexLock lock(&mu_);
    posting_ = false;
    if (status.ok() && !aborted_) ++layers_posted_;
    if (!status.ok() && error_.ok()) {
      error_ = status;
      queue_.clear();
    }
  }
}

bool StagedOutboundTransfer::WaitDrained(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(
                                   +[](StagedOutboundTransfer* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                                        t->mu_) { return t->queue_.empty() && !t->posting_; },
                                   this),
                               deadline);
}

absl::Status StagedOutboundTransfer::Finish(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  if (!WaitDrained(deadline)) {
    return absl::DeadlineExceededError("staged transfer: layers still copying at the deadline");
  }
  {
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
  }
  return inner_->Finish(std::max(absl::ZeroDuration(), deadline - absl::Now()));
}

absl::Status StagedOutboundTransfer::Abort(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  {
    absl::MutexLock lock(&mu_);
    aborted_ = true;
    queue_.clear();  // Layers not yet posted are never put.
  }
  if (!WaitDrained(deadline)) {
    return absl::DeadlineExceededError("staged transfer: a copy was still running at the deadline");
  }
  return inner_->Abort(std::max(absl::ZeroDuration(), deadline - absl::Now()));
}

int StagedOutboundTransfer::layers_posted() const {
  absl::MutexLock lock(&mu_);
  return layers_posted_;
}

}  // namespace pdserve::kvtransfer
