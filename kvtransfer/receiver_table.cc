#include "kvtransfer/receiver_table.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace pdserve::kvtransfer {
namespace {

constexpr size_t kRememberFinished = 4096;

}  // namespace

void ReceiverTable::Serve(const KvLayout& layout, uint64_t fingerprint, uint64_t epoch) {
  absl::MutexLock lock(&mu_);
  serving_ = true;
  layout_ = layout;
  fingerprint_ = fingerprint;
  layout_hash_ = HashLayout(layout, fingerprint);
  epoch_ = epoch;
}

bool ReceiverTable::serving() const {
  absl::MutexLock lock(&mu_);
  return serving_;
}

uint64_t ReceiverTable::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

absl::StatusOr<std::shared_ptr<InboundTransfer>> ReceiverTable::Expect(const TransferExpectation& e,
                                                                       bool count_bytes) {
  absl::MutexLock lock(&mu_);
  if (!serving_) return absl::FailedPreconditionError("kv receiver: no pool is being served");
  if (e.block_ids.empty()) return absl::InvalidArgumentError("kv receiver: no blocks to reserve");
  if (e.num_layers < 1 || e.num_layers > layout_.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("kv receiver: num_layers ", e.num_layers,
                                                   " is outside [1, ", layout_.num_layers, "]"));
  }
  if (reservations_.contains(e.token) || finished_.contains(e.token)) {
    return absl::AlreadyExistsError(
        absl::StrCat("kv receiver: token ", e.token, " was already used"));
  }
  absl::flat_hash_set<int32_t> blocks;
  for (int32_t b : e.block_ids) {
    if (b < 0 || b >= layout_.num_blocks) {
      ++counters_.rejected_bad_blocks;
      return absl::InvalidArgumentError(
          absl::StrCat("kv receiver: block id ", b, " is outside [0, ", layout_.num_blocks, ")"));
    }
    if (!blocks.insert(b).second) {
      ++counters_.rejected_bad_blocks;
      return absl::InvalidArgumentError(
          absl::StrCat("kv receiver: block id ", b, " appears twice"));
    }
    auto owner = block_owner_.find(b);
    if (owner != block_owner_.end()) {
      ++counters_.rejected_reservation_conflict;
      return absl::FailedPreconditionError(absl::StrCat(
          "kv receiver: block ", b, " is already reserved by transfer ", owner->second));
    }
  }
  const uint64_t bytes = count_bytes ? static_cast<uint64_t>(e.num_layers) * 2 *
                                           e.block_ids.size() * layout_.region_bytes()
                                     : 0;
  auto transfer = std::make_shared<InboundTransfer>(e.token, e.block_ids, e.num_layers, bytes);
  for (int32_t b : e.block_ids) block_owner_[b] = e.token;
  reservations_[e.token] = Reservation{transfer, std::move(blocks), HashBlocks(e.block_ids), false};
  return transfer;
}

void ReceiverTable::Release(uint64_t token) {
  absl::MutexLock lock(&mu_);
  auto it = reservations_.find(token);
  if (it == reservations_.end()) return;
  for (int32_t b : it->second.transfer->block_ids()) block_owner_.erase(b);
  it->second.transfer->Fail(absl::CancelledError(absl::StrCat("kv transfer ", token, " released")));
  reservations_.erase(it);
  RememberFinished(token);
}

void ReceiverTable::RememberFinished(uint64_t token) {
  if (!finished_.insert(token).second) return;
  finished_order_.push_back(token);
  while (finished_order_.size() > kRememberFinished) {
    finished_.erase(finished_order_.front());
    finished_order_.pop_front();
  }
}

absl::Status ReceiverTable::CheckCommon(uint64_t token, uint64_t epoch, uint64_t layout_hash,
                                        Reservation** out) {
  if (epoch != epoch_) {
    ++counters_.rejected_stale_epoch;
    return absl::FailedPreconditionError(
        absl::StrCat("kv receiver: epoch ", epoch, " is not the current ", epoch_));
  }
  if (layout_hash != layout_hash_) {
    ++counters_.rejected_layout;
    return absl::FailedPreconditionError("kv receiver: sender layout or model does not match");
  }
  auto it = reservations_.find(token);
  if (it == reservations_.end()) {
    if (finished_.contains(token)) {
      ++counters_.rejected_duplicate;
      return absl::AlreadyExistsError(
          absl::StrCat("kv receiver: transfer ", token, " already finished"));
    }
    ++counters_.rejected_unknown_token;
    return absl::NotFoundError(absl::StrCat("kv receiver: unknown transfer token ", token));
  }
  *out = &it->second;
  return absl::OkStatus();
}

absl::StatusOr<ReceiverTable::DataDestination> ReceiverTable::AcceptData(const DataHeader& h,
                                                                         size_t payload_bytes) {
  absl::MutexLock lock(&mu_);
  Reservation* r = nullptr;
  if (absl::Status s = CheckCommon(h.token, h.epoch, h.layout_hash, &r); !s.ok()) return s;
  if (r->completed) {
    ++counters_.rejected_duplicate;
    return absl::AlreadyExistsError("kv receiver: data after completion");
  }
  const bool bad_shape =
      h.kv > 1 || h.layer < 0 || h.layer >= r->transfer->num_layers() || h.num_blocks <= 0 ||
      payload_bytes != static_cast<size_t>(h.num_blocks) * layout_.region_bytes();
  bool owned = !bad_shape;
  for (int32_t i = 0; owned && i < h.num_blocks; ++i) owned = r->blocks.contains(h.first_block + i);
  if (!owned) {
    ++counters_.rejected_bad_blocks;
    return absl::PermissionDeniedError(absl::StrCat(
        "kv receiver: write to blocks [", h.first_block, ", ", h.first_block + h.num_blocks,
        ") of layer ", h.layer, " is outside transfer ", h.token, "'s reservation"));
  }
  r->transfer->WriteStarted();
  counters_.bytes_received += payload_bytes;
  return DataDestination{r->transfer, layout_.RegionOffset(h.layer, h.kv, h.first_block),
                         payload_bytes};
}

absl::Status ReceiverTable::AcceptControl(const ControlHeader& h) {
  absl::MutexLock lock(&mu_);
  Reservation* r = nullptr;
  if (absl::Status s = CheckCommon(h.token, h.epoch, h.layout_hash, &r); !s.ok()) return s;
  switch (h.type) {
    case ControlType::kLayerDone:
      r->transfer->LayerDone(h.layer);
      return absl::OkStatus();
    case ControlType::kComplete:
      if (r->completed) {
        ++counters_.rejected_duplicate;
        return absl::AlreadyExistsError(
            absl::StrCat("kv receiver: duplicate completion of ", h.token));
      }
      if (h.blocks_hash != r->blocks_hash) {
        ++counters_.rejected_bad_blocks;
        r->transfer->Fail(absl::DataLossError("kv receiver: completion names other blocks"));
        return absl::PermissionDeniedError(absl::StrCat(
            "kv receiver: completion of ", h.token, " is for blocks other than those reserved"));
      }
      if (h.layers != r->transfer->num_layers()) {
        r->transfer->Fail(
            absl::DataLossError(absl::StrCat("kv receiver: sender wrote ", h.layers,
                                             " layers, expected ", r->transfer->num_layers())));
        return absl::DataLossError("kv receiver: incomplete transfer");
      }
      r->completed = true;
      ++counters_.transfers_completed;
      r->transfer->SenderComplete(h.bytes);
      return absl::OkStatus();
    case ControlType::kAbort:
      ++counters_.transfers_failed;
      r->transfer->Fail(
          absl::AbortedError(absl::StrCat("kv transfer ", h.token, ": sender aborted")));
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("kv receiver: unknown control message");
}

void ReceiverTable::AddCounters(TransportCounters* c) const {
  absl::MutexLock lock(&mu_);
  c->transfers_completed += counters_.transfers_completed;
  c->transfers_failed += counters_.transfers_failed;
  c->bytes_received += counters_.bytes_received;
  c->rejected_unknown_token += counters_.rejected_unknown_token;
  c->rejected_stale_epoch += counters_.rejected_stale_epoch;
  c->rejected_duplicate += counters_.rejected_duplicate;
  c->rejected_bad_blocks += counters_.rejected_bad_blocks;
  c->rejected_layout += counters_.rejected_layout;
  c->rejected_reservation_conflict += counters_.rejected_reservation_conflict;
}

}  // namespace pdserve::kvtransfer
