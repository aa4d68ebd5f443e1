// The GPU data path's staging logic with host memory standing in for the device pools: a
// prefill "device" pool -> pinned staging -> (loopback transport) -> the decode worker's
// staging -> its "device" pool, layer by layer; ordering, aborts, exhaustion and copy failures.
#include <atomic>
#include <numeric>

#include "gtest/gtest.h"
#include "kvtransfer/loopback/loopback_transport.h"
#include "kvtransfer/staging/staged_transfer.h"
#include "kvtransfer/testing/host_block_copier.h"
#include "tests/kvtransfer/kv_test_data.h"

namespace pdserve::kvtransfer {
namespace {

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

// End to end over the loopback transport: the decode side's device blocks end up holding the
// prefill side's device blocks, every layer, and both staging leases are returned.
TEST(StagedTransferTest, MovesEveryLayerDeviceToDeviceThroughStaging) {
  auto fabric = std::make_shared<LoopbackFabric>();
  LoopbackTransport receiver(fabric, "decode-0"), sender(fabric, "prefill-0");
  FakeDevicePool prefill_device(32), decode_device(48);
  // Registered (pinned) staging pools: smaller than the device pools.
  auto sender_staging = sender.CreatePool(TestLayout(8));
  auto receiver_staging = receiver.CreatePool(TestLayout(8));
  ASSERT_TRUE(sender_staging.ok() && receiver_staging.ok());
  auto descriptor = receiver.ServePool(receiver_staging->get(), "decode-0", kFingerprint, 1);
  ASSERT_TRUE(descriptor.ok()) << descriptor.status();
  auto send_slots = StagingPool::Create(8, "--kv_staging_blocks");
  auto receive_slots = StagingPool::Create(8, "--kv_staging_blocks");
  HostBlockCopier send_copier(prefill_device.view(),
                              PoolView{(*sender_staging)->base(), (*sender_staging)->layout()});
  HostBlockCopier receive_copier(
      decode_device.view(), PoolView{(*receiver_staging)->base(), (*receiver_staging)->layout()});
  send_copier.set_delay(absl::Milliseconds(2));

  const std::vector<int32_t> source_blocks = {3, 4, 5, 17, 9};
  const std::vector<int32_t> destination_blocks = {40, 41, 2, 3, 30};
  FillSource(prefill_device.bytes.data(), prefill_device.layout, source_blocks, 4, kSeed);

  auto receive_lease = receive_slots->Acquire(5);
  ASSERT_TRUE(receive_lease.ok());
  auto inbound = receiver.Expect(TransferExpectation{7, receive_lease->blocks(), 4});
  ASSERT_TRUE(inbound.ok()) << inbound.status();
  auto send_lease = send_slots->Acquire(5);
  ASSERT_TRUE(send_lease.ok());
  auto inner = sender.Open(TransferTarget{*descriptor, 7, receive_lease->blocks()},
                           sender_staging->get(), kFingerprint);
  ASSERT_TRUE(inner.ok()) << inner.status();
  {
    StagedOutboundTransfer out(*std::move(inner), &send_copier, *std::move(send_lease));
    EXPECT_EQ(send_slots->free_blocks(), 3);
    for (int layer = 0; layer < 4; ++layer) ASSERT_TRUE(out.WriteLayer(layer, source_blocks).ok());
    ASSERT_TRUE(out.Finish(absl::Seconds(10)).ok());
    EXPECT_EQ(out.layers_posted(), 4);
  }
  EXPECT_EQ(send_slots->free_blocks(), 8);
  ASSERT_TRUE(LandStagedTransfer(**inbound, receive_copier, receive_lease->blocks(),
                                 destination_blocks, absl::Seconds(10))
                  .ok());
  *receive_lease = StagingLease();
  EXPECT_EQ(receive_slots->free_blocks(), 8);
  EXPECT_EQ(CountMismatches(decode_device.bytes.data(), decode_device.layout, destination_blocks, 4,
                            kSeed),
            0);
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
