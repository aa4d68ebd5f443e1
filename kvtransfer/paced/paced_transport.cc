#include "kvtransfer/paced/paced_transport.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::kvtransfer {

absl::Status LinkEmulation::Validate() const {
  if (!(bytes_per_ms >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("link emulation: bytes_per_ms ", bytes_per_ms, " must be >= 0"));
  }
  if (!(latency_ms >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("link emulation: latency_ms ", latency_ms, " must be >= 0"));
  }
  if (!(byte_scale > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("link emulation: byte_scale ", byte_scale, " must be > 0"));
  }
  return absl::OkStatus();
}

namespace {

absl::Duration Ms(double ms) { return absl::Microseconds(ms * 1e3); }

class PacedOutbound final : public OutboundTransfer {
 public:
  PacedOutbound(PacedTransport* transport, std::unique_ptr<OutboundTransfer> inner,
                size_t layer_block_bytes)
      : transport_(transport), inner_(std::move(inner)), layer_block_bytes_(layer_block_bytes) {}

  absl::Status WriteLayer(int layer, absl::Span<const int32_t> source_blocks) override {
    RETURN_IF_ERROR(inner_->WriteLayer(layer, source_blocks));
    const absl::Time end = transport_->Occupy(static_cast<double>(source_blocks.size()) *
                                              static_cast<double>(layer_block_bytes_));
    absl::MutexLock lock(&mu_);
    last_byte_ = std::max(last_byte_, end);
    return absl::OkStatus();
  }

  absl::Status Finish(absl::Duration timeout) override {
    Clock* clock = transport_->clock();
    const absl::Time start = clock->Now();
    absl::Time last_byte;
    {
      absl::MutexLock lock(&mu_);
      last_byte = last_byte_;
    }
    const absl::Time visible = last_byte + Ms(transport_->link().latency_ms);
    if (visible - start > timeout) {
      clock->SleepUntil(start + timeout);
      return absl::DeadlineExceededError(absl::StrCat(
          "paced transfer: the modelled link needs ", absl::FormatDuration(visible - start),
          ", more than the ", absl::FormatDuration(timeout), " allowed"));
    }
    clock->SleepUntil(visible);
    return inner_->Finish(timeout - (clock->Now() - start));
  }

  absl::Status Abort(absl::Duration timeout) override { return inner_->Abort(timeout); }
  int layers_written() const override { return inner_->layers_written(); }
  uint64_t bytes_written() const override { return inner_->bytes_written(); }
  DataPath data_path() const override { return inner_->data_path(); }

 private:
  PacedTransport* const transport_;
  const std::unique_ptr<OutboundTransfer> inner_;
  const size_t layer_block_bytes_;  // K and V of one block in one layer.
  absl::Mutex mu_;
  absl::Time last_byte_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace

PacedTransport::PacedTransport(std::unique_ptr<KvTransport> inner, const LinkEmulation& link,
                               Clock* clock)
    : KvTransportWrapper(inner.get()),
      owned_(std::move(inner)),
      link_(link),
      clock_(clock != nullptr ? clock : Clock::Real()) {}

absl::Time PacedTransport::Occupy(double real_bytes) {
  const absl::Duration busy = Ms(real_bytes * link_.byte_scale / link_.bytes_per_ms);
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  link_free_ = std::max(link_free_, now) + busy;
  return link_free_;
}

absl::StatusOr<std::unique_ptr<OutboundTransfer>> PacedTransport::Open(
    const TransferTarget& target, LocalPool* source, uint64_t source_fingerprint) {
  ASSIGN_OR_RETURN(std::unique_ptr<OutboundTransfer> inner,
                   inner()->Open(target, source, source_fingerprint));
  return std::unique_ptr<OutboundTransfer>(
      new PacedOutbound(this, std::move(inner), source->layout().region_bytes() * 2));
}

}  // namespace pdserve::kvtransfer
