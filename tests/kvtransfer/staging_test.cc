// The GPU data path's staging logic with host memory standing in for the device pools: a
// prefill "device" pool -> pinned staging -> (loopback transport) -> the decode worker's
// staging -> its "device" pool, layer by layer, through StagingTransport on both ends;
// ordering, landing, release, aborts, exhaustion and copy failures.
#include <atomic>
#include <numeric>

#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "kvtransfer/loopback/loopback_transport.h"
#include "kvtransfer/staging/staged_transfer.h"
#include "kvtransfer/staging/staging_transport.h"
#include "kvtransfer/testing/host_block_copier.h"
#include "tests/kvtransfer/kv_test_data.h"
#include "tests/testing/poll.h"

namespace pdserve::kvtransfer {
namespace {

using pdserve::testing::PollUntil;
using testing::CountMismatches;
using testing::FillSource;
using testing::TestLayout;

constexpr uint64_t kFingerprint = 0xfeed;
constexpr uint64_t kSeed = 99;

// Plain memory standing in for a device pool.
struct FakeDevicePool {
  explicit FakeDevicePool(int blocks) : layout(TestLayout(blocks)), bytes(layout.pool_bytes()) {}
  PoolView view() { return PoolView{bytes.data(), layout}; }
  KvLayout layout;
  std::vector<uint8_t> bytes;
};

// An inner transfer that records, when each layer is posted, whether the staging blocks
// already hold that layer's data (the copy completed first).
class RecordingTransfer final : public OutboundTransfer {
 public:
  RecordingTransfer(const uint8_t* staging, KvLayout layout, std::vector<int32_t> blocks)
      : staging_(staging), layout_(layout), blocks_(std::move(blocks)) {}
  absl::Status WriteLayer(int layer, absl::Span<const int32_t> source) override {
    EXPECT_EQ(std::vector<int32_t>(source.begin(), source.end()), blocks_);
    // Compare just this layer: FillSource's data for layer `layer` at these staging blocks.
    std::vector<uint8_t> expected(layout_.region_bytes());
    bool complete = true;
    for (int kv = 0; kv < 2; ++kv) {
      for (size_t i = 0; i < blocks_.size(); ++i) {
        testing::FillRegion(expected.data(), expected.size(), kSeed, layer, kv,
                            static_cast<int>(i));
        complete &= std::memcmp(staging_ + layout_.RegionOffset(layer, kv, blocks_[i]),
                                expected.data(), expected.size()) == 0;
      }
    }
    absl::MutexLock lock(&mu_);
    posted_.push_back(layer);
    complete_when_posted_.push_back(complete);
    return absl::OkStatus();
  }
  absl::Status Finish(absl::Duration) override {
    finished_ = true;
    return absl::OkStatus();
  }
  absl::Status Abort(absl::Duration) override {
    aborted_ = true;
    return absl::OkStatus();
  }
  int layers_written() const override { return static_cast<int>(posted().size()); }
  uint64_t bytes_written() const override { return 0; }
  DataPath data_path() const override { return DataPath::kMemcpy; }
  std::vector<int> posted() const {
    absl::MutexLock lock(&mu_);
    return posted_;
  }
  std::vector<bool> complete_when_posted() const {
    absl::MutexLock lock(&mu_);
    return complete_when_posted_;
  }
  std::atomic<bool> finished_{false}, aborted_{false};

 private:
  const uint8_t* staging_;
  KvLayout layout_;
  std::vector<int32_t> blocks_;
  mutable absl::Mutex mu_;
  std::vector<int> posted_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> complete_when_posted_ ABSL_GUARDED_BY(mu_);
};

// One sender over a 16-block "device" pool and a 4-block staging pool.
class StagedSenderTest : public ::testing::Test {
 protected:
  StagedSenderTest() : copier_(device_.view(), staging_.view()) {}
  // A staged transfer over `blocks` leased staging blocks, recording what it posts.
  std::unique_ptr<StagedOutboundTransfer> Start(int blocks) {
    auto lease = slots_->Acquire(blocks);
    EXPECT_TRUE(lease.ok()) << lease.status();
    auto recording = std::make_unique<RecordingTransfer>(staging_.bytes.data(), staging_.layout,
                                                         lease->blocks());
    record_ = recording.get();
    return std::make_unique<StagedOutboundTransfer>(std::move(recording), &copier_,
                                                    *std::move(lease));
  }

  FakeDevicePool device_{16}, staging_{4};
  HostBlockCopier copier_;
  std::shared_ptr<StagingPool> slots_ = StagingPool::Create(4, "--kv_staging_blocks");
  RecordingTransfer* record_ = nullptr;
};

// Both workers' ends of the GPU data path over the loopback transport: each side a
// StagingTransport over its registered (pinned) staging memory and a "device" pool.
struct StagedPair {
  StagedPair()
      : fabric(std::make_shared<LoopbackFabric>()),
        receiver(fabric, "decode-0"),
        sender(fabric, "prefill-0"),
        prefill_device(32),
        decode_device(48) {
    // Registered staging pools: smaller than the device pools.
    sender_staging = *sender.CreatePool(TestLayout(8));
    receiver_staging = *receiver.CreatePool(TestLayout(8));
    send_copier = std::make_unique<HostBlockCopier>(
        prefill_device.view(), PoolView{sender_staging->base(), sender_staging->layout()});
    receive_copier = std::make_unique<HostBlockCopier>(
        decode_device.view(), PoolView{receiver_staging->base(), receiver_staging->layout()});
    staged_sender = std::make_unique<StagingTransport>(&sender, sender_staging.get(),
                                                       send_copier.get(), send_slots, 32);
    staged_receiver = std::make_unique<StagingTransport>(&receiver, receiver_staging.get(),
                                                         receive_copier.get(), receive_slots, 48);
    descriptor = *staged_receiver->ServePool(receiver_staging.get(), "decode-0", kFingerprint, 1);
  }
  ~StagedPair() {
    staged_sender.reset();
    staged_receiver.reset();
  }
  // Sends `source` (prefill device blocks, every layer) for reservation `inbound`.
  absl::Status Send(const InboundTransfer& inbound, const std::vector<int32_t>& source) {
    auto out = staged_sender->Open(TransferTarget{descriptor, inbound.token(), inbound.block_ids()},
                                   sender_staging.get(), kFingerprint);
    if (!out.ok()) return out.status();
    for (int layer = 0; layer < 4; ++layer) RETURN_IF_ERROR((*out)->WriteLayer(layer, source));
    return (*out)->Finish(absl::Seconds(10));
  }

  std::shared_ptr<LoopbackFabric> fabric;
  LoopbackTransport receiver, sender;
  FakeDevicePool prefill_device, decode_device;
  std::unique_ptr<LocalPool> sender_staging, receiver_staging;
  std::shared_ptr<StagingPool> send_slots = StagingPool::Create(8, "--kv_staging_blocks");
  std::shared_ptr<StagingPool> receive_slots = StagingPool::Create(8, "--kv_staging_blocks");
  std::unique_ptr<HostBlockCopier> send_copier, receive_copier;
  std::unique_ptr<StagingTransport> staged_sender, staged_receiver;
  KvPoolDescriptor descriptor;
};

// End to end: the decode side's device blocks end up holding the prefill side's device blocks,
// every layer; the reservation lists the staging blocks the sender writes; completion comes
// only after the landing copy; both staging leases are returned.
TEST(StagingTransportTest, MovesEveryLayerDeviceToDeviceThroughStaging) {
  StagedPair pair;
  pair.send_copier->set_delay(absl::Milliseconds(2));
  const std::vector<int32_t> source_blocks = {3, 4, 5, 17, 9};
  const std::vector<int32_t> destination_blocks = {40, 41, 2, 3, 30};
  FillSource(pair.prefill_device.bytes.data(), pair.prefill_device.layout, source_blocks, 4, kSeed);
  pair.receive_copier->Hold();
  auto inbound = pair.staged_receiver->Expect(TransferExpectation{7, destination_blocks, 4});
  ASSERT_TRUE(inbound.ok()) << inbound.status();
  EXPECT_EQ((*inbound)->block_ids().size(), 5u);
  EXPECT_EQ(pair.receive_slots->free_blocks(), 3);
  EXPECT_FALSE((*inbound)->ExpectedBlocksMayBeWritten());
  ASSERT_TRUE(pair.Send(**inbound, source_blocks).ok());
  EXPECT_EQ(pair.send_slots->free_blocks(), 8);
  // The sender is done, but the data is not where it was expected until the copy lands.
  ASSERT_TRUE(PollUntil([&] { return pair.receive_copier->queued() == 1; }, absl::Seconds(10)));
  EXPECT_FALSE((*inbound)->done());
  EXPECT_TRUE((*inbound)->ExpectedBlocksMayBeWritten());  // The landing copy is in flight.
  pair.receive_copier->Resume();
  ASSERT_TRUE((*inbound)->Wait(absl::Seconds(10)).ok());
  EXPECT_FALSE((*inbound)->ExpectedBlocksMayBeWritten());
  EXPECT_EQ(CountMismatches(pair.decode_device.bytes.data(), pair.decode_device.layout,
                            destination_blocks, 4, kSeed),
            0);
  pair.staged_receiver->Release(7);
  EXPECT_EQ(pair.receive_slots->free_blocks(), 3);  // Held with the transfer...
  inbound->reset();
  // ...and back with the last hold: the lander thread's, which it drops just after completing
  // the transfer (read at once, this failed about one run in a hundred on a loaded machine).
  EXPECT_TRUE(PollUntil([&] { return pair.receive_slots->free_blocks() == 8; }, absl::Seconds(10)));
}

// Released before its data arrived (the receiver gave up): the transfer fails, no landing copy
// ever starts (the expected blocks stay clean), and data that still comes is not copied.
TEST(StagingTransportTest, AReleasedReservationNeverLands) {
  StagedPair pair;
  const std::vector<int32_t> source_blocks = {1, 2};
  const std::vector<int32_t> destination_blocks = {10, 11};
  FillSource(pair.prefill_device.bytes.data(), pair.prefill_device.layout, source_blocks, 4, kSeed);
  auto inbound = pair.staged_receiver->Expect(TransferExpectation{9, destination_blocks, 4});
  ASSERT_TRUE(inbound.ok()) << inbound.status();
  pair.staged_receiver->Release(9);
  EXPECT_TRUE((*inbound)->done());
  EXPECT_EQ((*inbound)->status().code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE((*inbound)->ExpectedBlocksMayBeWritten());
  pair.Send(**inbound, source_blocks).IgnoreError();  // The receiver rejects it.
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(pair.receive_copier->completed(), 0u);
  EXPECT_EQ(pair.receive_copier->queued(), 0);
  EXPECT_EQ(CountMismatches(pair.decode_device.bytes.data(), pair.decode_device.layout,
                            destination_blocks, 4, kSeed),
            2 * 2 * 4);  // Every (block, K|V, layer) region still zero.
}

// Bad reservations and transfers too large for the staging pool are refused, naming the limit,
// and hold nothing.
TEST(StagingTransportTest, RefusesBlocksOutsideThePoolAndAFullStagingPool) {
  StagedPair pair;
  auto outside = pair.staged_receiver->Expect(TransferExpectation{1, {47, 48}, 4});
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(outside.status().message().find("block 48 outside the KV pool's [0, 48)"),
            std::string::npos)
      << outside.status();
  auto too_many =
      pair.staged_receiver->Expect(TransferExpectation{2, {0, 1, 2, 3, 4, 5, 6, 7, 8}, 4});
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_many.status().message().find("(--kv_staging_blocks)"), std::string::npos)
      << too_many.status();
  EXPECT_EQ(pair.receive_slots->free_blocks(), 8);
  const absl::Status size = pair.staged_sender->CheckTransferSize(9);
  EXPECT_EQ(size.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(size.message().find("9 transferred KV blocks exceed the staging pool of 8 blocks"),
            std::string::npos)
      << size;
  EXPECT_TRUE(pair.staged_sender->CheckTransferSize(8).ok());
  TransferTarget target{pair.descriptor, 3, {0, 1}};
  EXPECT_EQ(
      pair.staged_sender->Open(target, pair.receiver_staging.get(), kFingerprint).status().code(),
      absl::StatusCode::kInvalidArgument);  // Not the memory it registered.
  EXPECT_EQ(pair.send_slots->free_blocks(), 8);
}

// A layer is put only after its device -> staging copy completed, in layer order, and
// WriteLayer does not wait for the copy (it returns while copies are still running).
TEST_F(StagedSenderTest, PutsEachLayerOnlyAfterItsCopyCompleted) {
  copier_.set_delay(absl::Milliseconds(50));
  const std::vector<int32_t> source = {5, 6, 11};
  FillSource(device_.bytes.data(), device_.layout, source, 4, kSeed);
  auto out = Start(3);
  for (int layer = 0; layer < 4; ++layer) ASSERT_TRUE(out->WriteLayer(layer, source).ok());
  EXPECT_LT(copier_.completed(), 4u);  // 4 x 50 ms of copies are still running.
  ASSERT_TRUE(out->Finish(absl::Seconds(10)).ok());
  EXPECT_TRUE(record_->finished_);
  EXPECT_EQ(record_->posted(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(record_->complete_when_posted(), (std::vector<bool>{true, true, true, true}));
}

// Aborting mid-transfer: layers still queued are never put, the inner transfer is aborted,
// writes after the abort are refused, and the staging blocks go back once the copies stopped.
TEST_F(StagedSenderTest, AbortDropsQueuedLayersAndReturnsTheStagingBlocks) {
  copier_.set_delay(absl::Milliseconds(30));
  {
    auto out = Start(2);
    const std::vector<int32_t> source = {1, 2};
    for (int layer = 0; layer < 4; ++layer) ASSERT_TRUE(out->WriteLayer(layer, source).ok());
    ASSERT_TRUE(out->Abort(absl::Seconds(10)).ok());
    EXPECT_TRUE(record_->aborted_);
    EXPECT_LT(record_->posted().size(), 4u);
    const size_t posted_at_abort = record_->posted().size();
    EXPECT_EQ(out->WriteLayer(0, source).code(), absl::StatusCode::kFailedPrecondition);
    absl::SleepFor(absl::Milliseconds(150));  // Copies in the queue finish; nothing more is put.
    EXPECT_EQ(record_->posted().size(), posted_at_abort);
    EXPECT_EQ(slots_->free_blocks(), 2);
  }
  EXPECT_EQ(slots_->free_blocks(), 4);
}

// A failed copy fails the transfer (Finish reports it) and stops later layers.
TEST_F(StagedSenderTest, AFailedCopyFailsTheTransfer) {
  auto out = Start(1);
  const std::vector<int32_t> source = {3};
  ASSERT_TRUE(out->WriteLayer(0, source).ok());
  copier_.FailNextCopy(absl::InternalError("cuda copy: an illegal memory access"));
  ASSERT_TRUE(out->WriteLayer(1, source).ok());
  const absl::Status finished = out->Finish(absl::Seconds(10));
  EXPECT_EQ(finished.code(), absl::StatusCode::kInternal);
  EXPECT_NE(finished.message().find("illegal memory access"), std::string::npos) << finished;
  EXPECT_EQ(record_->posted(), (std::vector<int>{0}));
  EXPECT_FALSE(record_->finished_);
  EXPECT_EQ(out->WriteLayer(2, source).code(), absl::StatusCode::kInternal);
}

// Bad inputs are refused with the field and the limit, and nothing leaks.
TEST(StagedTransferTest, RefusesBadBlocksAndAnExhaustedPool) {
  auto slots = StagingPool::Create(4, "--kv_staging_blocks");
  auto too_many = slots->Acquire(5);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_many.status().message().find("5 blocks wanted, 4 of 4 free (--kv_staging_blocks)"),
            std::string::npos)
      << too_many.status();
  auto first = slots->Acquire(3);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->blocks(), (std::vector<int32_t>{0, 1, 2}));  // Consecutive: one copy.
  EXPECT_EQ(slots->Acquire(2).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(slots->free_blocks(), 1);

  FakeDevicePool device(16), staging(4);
  HostBlockCopier copier(device.view(), staging.view());
  auto out_of_range = copier.DeviceToHost(0, std::vector<int32_t>{16}, std::vector<int32_t>{0});
  EXPECT_NE(out_of_range.status().message().find("device block 16 outside [0, 16)"),
            std::string::npos)
      << out_of_range.status();
  auto bad_layer = copier.DeviceToHost(4, std::vector<int32_t>{1}, std::vector<int32_t>{0});
  EXPECT_NE(bad_layer.status().message().find("layers [4, 5) outside [0, 4)"), std::string::npos)
      << bad_layer.status();
  KvLayout other = TestLayout(4);
  other.head_dim *= 2;
  std::vector<uint8_t> other_bytes(other.pool_bytes());
  HostBlockCopier mismatched(device.view(), PoolView{other_bytes.data(), other});
  EXPECT_EQ(
      mismatched.DeviceToHost(0, std::vector<int32_t>{1}, std::vector<int32_t>{0}).status().code(),
      absl::StatusCode::kFailedPrecondition);

  auto recording =
      std::make_unique<RecordingTransfer>(staging.bytes.data(), staging.layout, first->blocks());
  StagedOutboundTransfer out(std::move(recording), &copier, *std::move(first));
  const absl::Status wrong_count = out.WriteLayer(0, std::vector<int32_t>{1, 2});
  EXPECT_NE(wrong_count.message().find("2 device blocks for 3 staging blocks"), std::string::npos)
      << wrong_count;
}

// The copies a staged layer needs: one per run of consecutive block pairs per K|V.
TEST(StagedTransferTest, PlansOneCopyPerConsecutiveRun) {
  const KvLayout layout = TestLayout(32);
  auto copies = PlanRegionCopies(layout, TestLayout(8), 2, 1, std::vector<int32_t>{4, 5, 6, 20},
                                 std::vector<int32_t>{0, 1, 2, 3});
  ASSERT_TRUE(copies.ok());
  ASSERT_EQ(copies->size(), 4u);  // (K, V) x runs {4-6 -> 0-2, 20 -> 3}.
  EXPECT_EQ((*copies)[0].device_offset, layout.RegionOffset(2, 0, 4));
  EXPECT_EQ((*copies)[0].host_offset, TestLayout(8).RegionOffset(2, 0, 0));
  EXPECT_EQ((*copies)[0].bytes, 3 * layout.region_bytes());
  EXPECT_EQ((*copies)[3].device_offset, layout.RegionOffset(2, 1, 20));
}

}  // namespace
}  // namespace pdserve::kvtransfer
