#include "kvtransfer/testing/fault_injecting_transport.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace pdserve::kvtransfer {

class FaultyOutbound final : public OutboundTransfer {
 public:
  FaultyOutbound(FaultInjectingTransport* owner, std::unique_ptr<OutboundTransfer> inner,
                 FaultPlan plan)
      : owner_(owner), inner_(std::move(inner)), plan_(plan) {}

  absl::Status WriteLayer(int layer, absl::Span<const int32_t> source_blocks) override {
    if (plan_.write_delay > absl::ZeroDuration()) absl::SleepFor(plan_.write_delay);
    if (plan_.fail_after_writes >= 0 && writes_ >= plan_.fail_after_writes) {
      owner_->injected_failures_.fetch_add(1);
      return absl::UnavailableError(absl::StrCat("injected fault: write ", writes_ + 1, " failed"));
    }
    ++writes_;
    return inner_->WriteLayer(layer, source_blocks);
  }
  absl::Status Finish(absl::Duration timeout) override {
    if (plan_.drop_completion) {
      owner_->injected_failures_.fetch_add(1);
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(inner_->Finish(timeout));
    if (plan_.duplicate_completion) {
      owner_->injected_failures_.fetch_add(1);
      return inner_->Finish(timeout);
    }
    return absl::OkStatus();
  }
  absl::Status Abort(absl::Duration timeout) override { return inner_->Abort(timeout); }
  int layers_written() const override { return inner_->layers_written(); }
  uint64_t bytes_written() const override { return inner_->bytes_written(); }
  DataPath data_path() const override { return inner_->data_path(); }

 private:
  FaultInjectingTransport* owner_;
  std::unique_ptr<OutboundTransfer> inner_;
  FaultPlan plan_;
  int writes_ = 0;
};

void FaultInjectingTransport::SetPlan(const FaultPlan& plan) {
  absl::MutexLock lock(&mu_);
  plan_ = plan;
}

FaultPlan FaultInjectingTransport::plan() const {
  absl::MutexLock lock(&mu_);
  return plan_;
}

absl::StatusOr<std::unique_ptr<OutboundTransfer>> FaultInjectingTransport::Open(
    const TransferTarget& target, LocalPool* source, uint64_t source_fingerprint) {
  ASSIGN_OR_RETURN(auto inner, inner()->Open(target, source, source_fingerprint));
  return std::unique_ptr<OutboundTransfer>(new FaultyOutbound(this, std::move(inner), plan()));
}

}  // namespace pdserve::kvtransfer
