#include "kvtransfer/loopback/loopback_transport.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::kvtransfer {
namespace {

class HeapPool final : public LocalPool {
 public:
  explicit HeapPool(const KvLayout& layout) : layout_(layout), bytes_(layout.pool_bytes()) {
    base_ = std::aligned_alloc(4096, (bytes_ + 4095) / 4096 * 4096);
    std::memset(base_, 0, bytes_);
  }
  ~HeapPool() override { std::free(base_); }
  void* base() const override { return base_; }
  size_t bytes() const override { return bytes_; }
  const KvLayout& layout() const override { return layout_; }

 private:
  KvLayout layout_;
  size_t bytes_;
  void* base_;
};

}  // namespace

void LoopbackFabric::Register(const std::string& address, LoopbackTransport* transport) {
  absl::MutexLock lock(&mu_);
  transports_[address] = transport;
}

void LoopbackFabric::Unregister(const std::string& address) {
  absl::MutexLock lock(&mu_);
  transports_.erase(address);
}

LoopbackTransport* LoopbackFabric::Find(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = transports_.find(address);
  return it == transports_.end() ? nullptr : it->second;
}

class LoopbackOutbound final : public OutboundTransfer {
 public:
  LoopbackOutbound(LoopbackTransport* sender, std::shared_ptr<LoopbackFabric> fabric,
                   TransferTarget target, LocalPool* source)
      : sender_(sender),
        fabric_(std::move(fabric)),
        target_(std::move(target)),
        source_(source),
        layout_hash_(HashLayout(target_.pool.layout, target_.pool.model_fingerprint)) {}

  absl::Status WriteLayer(int layer, absl::Span<const int32_t> source_blocks) override {
    if (aborted_) return absl::CancelledError("kv transfer: aborted");
    const KvLayout& src = source_->layout();
    if (layer < 0 || layer >= src.num_layers || source_blocks.size() != target_.block_ids.size()) {
      return absl::InvalidArgumentError("kv transfer: bad layer or block count");
    }
    LoopbackTransport* receiver = fabric_->Find(target_.pool.worker_address);
    if (receiver == nullptr) return absl::UnavailableError("kv transfer: receiver is gone");
    for (int kv = 0; kv < 2; ++kv) {
      for (const BlockRun& run : CoalesceRuns(source_blocks, target_.block_ids)) {
        DataHeader h;
        h.kv = static_cast<uint16_t>(kv);
        h.token = target_.token;
        h.epoch = target_.pool.epoch;
        h.layout_hash = layout_hash_;
        h.layer = layer;
        h.first_block = run.target_first;
        h.num_blocks = run.count;
        const size_t bytes = src.region_bytes() * run.count;
        const uint8_t* from = static_cast<const uint8_t*>(source_->base()) +
                              src.RegionOffset(layer, kv, run.source_first);
        RETURN_IF_ERROR(receiver->DeliverData(h, from, bytes));
        bytes_ += bytes;
        sender_->bytes_sent_ += bytes;
        ++sender_->operations_posted_;
      }
    }
    ++layers_;
    ControlHeader done = Control(ControlType::kLayerDone);
    done.layer = layer;
    return receiver->DeliverControl(done);
  }

  absl::Status Finish(absl::Duration) override {
    LoopbackTransport* receiver = fabric_->Find(target_.pool.worker_address);
    if (receiver == nullptr) return absl::UnavailableError("kv transfer: receiver is gone");
    ControlHeader h = Control(ControlType::kComplete);
    h.layers = layers_;
    h.bytes = bytes_;
    // As on UCX, Finish means "the completion was delivered": accepting it (or rejecting and
    // counting a duplicate) is the receiver's business.
    receiver->DeliverControl(h).IgnoreError();
    return absl::OkStatus();
  }

  absl::Status Abort(absl::Duration) override {
    aborted_ = true;  // Writes are synchronous: nothing is in flight once this returns.
    if (LoopbackTransport* receiver = fabric_->Find(target_.pool.worker_address)) {
      receiver->DeliverControl(Control(ControlType::kAbort)).IgnoreError();
    }
    return absl::OkStatus();
  }

  int layers_written() const override { return layers_; }
  uint64_t bytes_written() const override { return bytes_; }
  DataPath data_path() const override { return DataPath::kMemcpy; }

 private:
  ControlHeader Control(ControlType type) const {
    ControlHeader h;
    h.type = type;
    h.token = target_.token;
    h.epoch = target_.pool.epoch;
    h.layout_hash = layout_hash_;
    h.blocks_hash = HashBlocks(target_.block_ids);
    return h;
  }

  LoopbackTransport* sender_;
  std::shared_ptr<LoopbackFabric> fabric_;
  TransferTarget target_;
  LocalPool* source_;
  uint64_t layout_hash_;
  int layers_ = 0;
  uint64_t bytes_ = 0;
  bool aborted_ = false;
};

LoopbackTransport::LoopbackTransport(std::shared_ptr<LoopbackFabric> fabric, std::string address)
    : fabric_(std::move(fabric)), address_(std::move(address)) {}

LoopbackTransport::~LoopbackTransport() { fabric_->Unregister(address_); }

absl::StatusOr<std::unique_ptr<LocalPool>> LoopbackTransport::CreatePool(const KvLayout& layout) {
  RETURN_IF_ERROR(layout.Validate());
  return std::unique_ptr<LocalPool>(new HeapPool(layout));
}

absl::StatusOr<KvPoolDescriptor> LoopbackTransport::ServePool(LocalPool* pool,
                                                              const std::string& receiver_id,
                                                              uint64_t model_fingerprint,
                                                              uint64_t epoch) {
  KvPoolDescriptor d;
  d.receiver_id = receiver_id;
  d.worker_address = address_;
  d.packed_rkey = "loopback";
  d.base_address = reinterpret_cast<uint64_t>(pool->base());
  d.layout = pool->layout();
  d.model_fingerprint = model_fingerprint;
  d.epoch = epoch;
  table_.Serve(pool->layout(), model_fingerprint, epoch);
  served_pool_.store(pool);
  fabric_->Register(address_, this);
  return d;
}

absl::StatusOr<std::shared_ptr<InboundTransfer>> LoopbackTransport::Expect(
    const TransferExpectation& e) {
  return table_.Expect(e, /*count_bytes=*/true);
}

void LoopbackTransport::Release(uint64_t token) { table_.Release(token); }

absl::StatusOr<std::unique_ptr<OutboundTransfer>> LoopbackTransport::Open(
    const TransferTarget& target, LocalPool* source, uint64_t source_fingerprint) {
  RETURN_IF_ERROR(ValidateTarget(target, source->layout(), source_fingerprint));
  if (fabric_->Find(target.pool.worker_address) == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("kv transfer: no receiver at ", target.pool.worker_address));
  }
  return std::unique_ptr<OutboundTransfer>(new LoopbackOutbound(this, fabric_, target, source));
}

TransportCounters LoopbackTransport::counters() const {
  TransportCounters c;
  table_.AddCounters(&c);
  c.bytes_sent = bytes_sent_.load();
  c.operations_posted = operations_posted_.load();
  return c;
}

absl::Status LoopbackTransport::DeliverData(const DataHeader& header, const void* data,
                                            size_t bytes) {
  ASSIGN_OR_RETURN(ReceiverTable::DataDestination dest, table_.AcceptData(header, bytes));
  std::memcpy(static_cast<uint8_t*>(served_pool_.load()->base()) + dest.pool_offset, data, bytes);
  dest.transfer->AddReceivedBytes(bytes);
  dest.transfer->WriteFinished();
  return absl::OkStatus();
}

absl::Status LoopbackTransport::DeliverControl(const ControlHeader& header) {
  return table_.AcceptControl(header);
}

}  // namespace pdserve::kvtransfer
