#include "kvtransfer/staging/staging_transport.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "kvtransfer/staging/staged_transfer.h"

namespace pdserve::kvtransfer {
namespace {

// How often a landing copy's wait looks up from the copier (for shutdown and its timeout).
constexpr absl::Duration kWaitSlice = absl::Milliseconds(100);

}  // namespace

// One reservation: what the caller sees (`transfer`, listing the staging blocks), the inner
// reservation the sender writes, the KV blocks the landing copy fills, and the staging lease,
// which returns when the last holder of `transfer` lets go.
struct StagingTransport::Landing {
  Landing(uint64_t token, StagingLease lease, std::vector<int32_t> kv, int num_layers)
      : transfer(token, lease.blocks(), num_layers, /*expected_bytes=*/0),
        kv_blocks(std::move(kv)),
        lease(std::move(lease)) {
    transfer.SetLandedByCopy();
  }
  InboundTransfer transfer;
  const std::vector<int32_t> kv_blocks;
  const StagingLease lease;
  std::shared_ptr<InboundTransfer> inner;
};

// The landing thread: copies each completed inner transfer from its staging blocks into its KV
// blocks and completes the caller's transfer once the copy landed. Shared with the inner
// transfers' completion callbacks, which may run after the transport is gone (they find the
// lander stopped).
class StagingTransport::Lander {
 public:
  Lander(BlockCopier* copier, absl::Duration copy_timeout)
      : copier_(copier), copy_timeout_(copy_timeout), thread_([this] { Run(); }) {}

  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      queue_.clear();
    }
    thread_.join();
  }

  // Called from the inner transfer's completion callback: must not block.
  void Enqueue(std::weak_ptr<Landing> landing) {
    absl::MutexLock lock(&mu_);
    if (!stop_) queue_.push_back(std::move(landing));
  }

 private:
  void Run() {
    while (true) {
      std::weak_ptr<Landing> next;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](Lander* l)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(l->mu_) { return l->stop_ || !l->queue_.empty(); },
            this));
        if (stop_) return;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      // Nobody holds the transfer any more: nobody waits for its data either.
      if (std::shared_ptr<Landing> landing = next.lock()) Land(*landing);
    }
  }

  bool stopping() {
    absl::MutexLock lock(&mu_);
    return stop_;
  }

  void Land(Landing& landing) {
    InboundTransfer& transfer = landing.transfer;
    if (absl::Status s = landing.inner->status(); !s.ok()) {
      transfer.Fail(std::move(s));
      return;
    }
    // Released or failed meanwhile: the KV blocks may have been handed back to their sequence,
    // so nothing may write them.
    if (!transfer.StartWriteUnlessDone()) return;
    absl::StatusOr<uint64_t> ticket =
        copier_->HostToDevice(landing.lease.blocks(), landing.kv_blocks);
    if (!ticket.ok()) {
      transfer.WriteFinished();  // Nothing was copied.
      transfer.Fail(ticket.status());
      return;
    }
    const absl::Time started = absl::Now();
    absl::Status copied;
    while (true) {
      copied = copier_->Wait(*ticket, kWaitSlice);
      if (!absl::IsDeadlineExceeded(copied)) break;
      if (absl::Now() - started >= copy_timeout_) {
        transfer.Fail(absl::DeadlineExceededError(
            absl::StrCat("kv transfer ", transfer.token(), ": staging copy not landed after ",
                         absl::FormatDuration(copy_timeout_))));
      }
      // Still counted as a write in flight: the KV blocks stay held until the copy ends.
      if (stopping()) return;
    }
    if (copied.ok()) {
      transfer.SenderComplete(0);  // Completes once the write below ends.
      transfer.WriteFinished();
    } else {
      // The copy ended (it failed): nothing writes the blocks any more, whatever it left there.
      transfer.WriteFinished();
      transfer.Fail(std::move(copied));
    }
  }

  BlockCopier* const copier_;
  const absl::Duration copy_timeout_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::weak_ptr<Landing>> queue_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // Last: started once the rest is constructed.
};

StagingTransport::StagingTransport(KvTransport* inner, LocalPool* staging_memory,
                                   BlockCopier* copier, std::shared_ptr<StagingPool> leases,
                                   int kv_pool_blocks, StagingTransportOptions options)
    : KvTransportWrapper(inner),
      staging_memory_(staging_memory),
      copier_(copier),
      leases_(std::move(leases)),
      kv_pool_blocks_(kv_pool_blocks),
      lander_(std::make_shared<Lander>(copier, options.copy_timeout)) {}

StagingTransport::~StagingTransport() { lander_->Stop(); }

absl::StatusOr<std::shared_ptr<InboundTransfer>> StagingTransport::Expect(
    const TransferExpectation& expectation) {
  for (const int32_t block : expectation.block_ids) {
    if (block < 0 || block >= kv_pool_blocks_) {
      return absl::InvalidArgumentError(absl::StrCat("staged reservation: block ", block,
                                                     " outside the KV pool's [0, ", kv_pool_blocks_,
                                                     ")"));
    }
  }
  ASSIGN_OR_RETURN(StagingLease lease,
                   leases_->Acquire(static_cast<int>(expectation.block_ids.size())));
  TransferExpectation staged = expectation;
  staged.block_ids = lease.blocks();
  ASSIGN_OR_RETURN(std::shared_ptr<InboundTransfer> inner, inner()->Expect(staged));
  auto landing = std::make_shared<Landing>(expectation.token, std::move(lease),
                                           expectation.block_ids, expectation.num_layers);
  landing->inner = inner;
  {
    absl::MutexLock lock(&mu_);
    // Forget reservations whose holders all let go without releasing them.
    absl::erase_if(landings_, [](const auto& entry) { return entry.second.expired(); });
    landings_[expectation.token] = landing;
  }
  inner->OnDone([lander = std::weak_ptr<Lander>(lander_), weak = std::weak_ptr<Landing>(landing)] {
    if (std::shared_ptr<Lander> l = lander.lock()) l->Enqueue(weak);
  });
  // The caller's handle keeps the whole landing (and so the lease) alive.
  return std::shared_ptr<InboundTransfer>(landing, &landing->transfer);
}

void StagingTransport::Release(uint64_t token) {
  inner()->Release(token);
  std::shared_ptr<Landing> landing;
  {
    absl::MutexLock lock(&mu_);
    auto it = landings_.find(token);
    if (it == landings_.end()) return;
    landing = it->second.lock();
    landings_.erase(it);
  }
  if (landing != nullptr) {
    landing->transfer.Fail(
        absl::CancelledError(absl::StrCat("kv transfer ", token, ": released by the receiver")));
  }
}

absl::StatusOr<std::unique_ptr<OutboundTransfer>> StagingTransport::Open(
    const TransferTarget& target, LocalPool* source, uint64_t source_fingerprint) {
  if (source != staging_memory_) {
    return absl::InvalidArgumentError(
        "staged transfer: the source must be the staging memory this transport registered");
  }
  RETURN_IF_ERROR(CheckTransferSize(target.block_ids.size()));
  ASSIGN_OR_RETURN(StagingLease lease, leases_->Acquire(static_cast<int>(target.block_ids.size())));
  ASSIGN_OR_RETURN(std::unique_ptr<OutboundTransfer> transfer,
                   inner()->Open(target, staging_memory_, source_fingerprint));
  return std::make_unique<StagedOutboundTransfer>(std::move(transfer), copier_, std::move(lease));
}

absl::Status StagingTransport::CheckTransferSize(size_t num_blocks) const {
  if (num_blocks > static_cast<size_t>(leases_->num_blocks())) {
    return absl::ResourceExhaustedError(
        absl::StrCat(num_blocks, " transferred KV blocks exceed the staging pool of ",
                     leases_->num_blocks(), " blocks (", leases_->flag(), ")"));
  }
  return inner()->CheckTransferSize(num_blocks);
}

}  // namespace pdserve::kvtransfer
