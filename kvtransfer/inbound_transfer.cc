#include "kvtransfer/inbound_transfer.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pdserve::kvtransfer {

InboundTransfer::InboundTransfer(uint64_t token, std::vector<int32_t> block_ids, int num_layers,
                                 uint64_t expected_bytes)
    : token_(token),
      block_ids_(std::move(block_ids)),
      num_layers_(num_layers),
      expected_bytes_(expected_bytes) {}

int InboundTransfer::layers_done() const {
  absl::MutexLock lock(&mu_);
  return layers_done_;
}

bool InboundTransfer::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

absl::Status InboundTransfer::Wait(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto finished = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&finished), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("kv transfer ", token_, ": not complete after ",
                                                    absl::FormatDuration(timeout), " (",
                                                    layers_done_, "/", num_layers_, " layers)"));
  }
  return status_;
}

absl::Status InboundTransfer::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

absl::Time InboundTransfer::completed_at() const {
  absl::MutexLock lock(&mu_);
  return completed_at_;
}

int InboundTransfer::writes_in_flight() const {
  absl::MutexLock lock(&mu_);
  return writes_in_flight_;
}

bool InboundTransfer::ExpectedBlocksMayBeWritten() const {
  absl::MutexLock lock(&mu_);
  return !landed_by_copy_ || writes_in_flight_ > 0;
}

void InboundTransfer::SetLandedByCopy() {
  absl::MutexLock lock(&mu_);
  landed_by_copy_ = true;
}

bool InboundTransfer::StartWriteUnlessDone() {
  absl::MutexLock lock(&mu_);
  if (done_) return false;
  ++writes_in_flight_;
  return true;
}

void InboundTransfer::OnDone(std::function<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (!done_) {
      on_done_ = std::move(fn);
      return;
    }
  }
  fn();
}

std::function<void()> InboundTransfer::TakeDoneCallbackLocked() {
  std::function<void()> fn;
  if (done_) fn.swap(on_done_);
  return fn;
}

void InboundTransfer::LayerDone(int layer) {
  absl::MutexLock lock(&mu_);
  layers_done_ = std::max(layers_done_, layer + 1);
}

void InboundTransfer::AddReceivedBytes(uint64_t bytes) {
  std::function<void()> done;
  {
    absl::MutexLock lock(&mu_);
    received_bytes_ += bytes;
    MaybeCompleteLocked();
    done = TakeDoneCallbackLocked();
  }
  if (done) done();
}

void InboundTransfer::WriteStarted() {
  absl::MutexLock lock(&mu_);
  ++writes_in_flight_;
}

void InboundTransfer::WriteFinished() {
  std::function<void()> done;
  {
    absl::MutexLock lock(&mu_);
    --writes_in_flight_;
    MaybeCompleteLocked();
    done = TakeDoneCallbackLocked();
  }
  if (done) done();
}

void InboundTransfer::SenderComplete(uint64_t total_bytes) {
  std::function<void()> done;
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    sender_complete_ = true;
    sender_total_bytes_ = total_bytes;
    layers_done_ = num_layers_;
    if (total_bytes != 0 && total_bytes != expected_bytes_) {
      done_ = true;
      status_ =
          absl::DataLossError(absl::StrCat("kv transfer ", token_, ": sender wrote ", total_bytes,
                                           " bytes, expected ", expected_bytes_));
      completed_at_ = absl::Now();
    } else {
      MaybeCompleteLocked();
    }
    done = TakeDoneCallbackLocked();
  }
  if (done) done();
}

void InboundTransfer::Fail(absl::Status status) {
  std::function<void()> done;
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    done_ = true;
    status_ = std::move(status);
    completed_at_ = absl::Now();
    done = TakeDoneCallbackLocked();
  }
  if (done) done();
}

void InboundTransfer::MaybeCompleteLocked() {
  if (done_ || !sender_complete_ || writes_in_flight_ > 0) return;
  if (sender_total_bytes_ != 0 && received_bytes_ < sender_total_bytes_) return;
  done_ = true;
  status_ = absl::OkStatus();
  completed_at_ = absl::Now();
}

}  // namespace pdserve::kvtransfer
