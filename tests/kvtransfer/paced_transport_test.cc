// The paced transport: the data lands through the inner transport as always, and the
// completion reaches the receiver only when the modelled link would have delivered the real
// model's bytes (each layer in turn on one shared link, then the latency), on the clock given.
#include "kvtransfer/paced/paced_transport.h"

#include <numeric>

#include "gtest/gtest.h"
#include "kvtransfer/loopback/loopback_transport.h"
#include "tests/kvtransfer/kv_test_data.h"
#include "tests/testing/jumping_clock.h"

namespace pdserve::kvtransfer {
namespace {

using testing::CountMismatches;
using testing::FillSource;
using testing::TestLayout;

constexpr uint64_t kFingerprint = 0xabc;

using pdserve::testing::JumpingClock;

class PacedTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto fabric = std::make_shared<LoopbackFabric>();
    receiver_ = std::make_unique<LoopbackTransport>(fabric, "decode-0");
    // Each real byte stands for 100; 1 MB/ms; 0.5 ms latency.
    link_ = LinkEmulation{.bytes_per_ms = 1e6, .latency_ms = 0.5, .byte_scale = 100};
    sender_ = std::make_unique<PacedTransport>(
        std::make_unique<LoopbackTransport>(fabric, "prefill-0"), link_, &clock_);
    pool_ = *receiver_->CreatePool(TestLayout(64));
    source_ = *sender_->CreatePool(TestLayout(32));
    descriptor_ = *receiver_->ServePool(pool_.get(), "decode-0", kFingerprint, 1);
  }
  void TearDown() override {
    source_.reset();
    pool_.reset();
    sender_.reset();
    receiver_.reset();
  }
  // Modelled ms one layer of `blocks` blocks occupies the link.
  double LayerMs(int blocks) const {
    return blocks * source_->layout().region_bytes() * 2.0 * link_.byte_scale / link_.bytes_per_ms;
  }

  JumpingClock clock_;
  LinkEmulation link_;
  std::unique_ptr<KvTransport> receiver_;
  std::unique_ptr<PacedTransport> sender_;
  std::unique_ptr<LocalPool> pool_, source_;
  KvPoolDescriptor descriptor_;
};

TEST_F(PacedTransportTest, CompletionWaitsForTheModelledLinkAndTheDataIsIntact) {
  const std::vector<int32_t> src = {3, 4, 9, 10}, dst = {40, 41, 7, 8};
  FillSource(static_cast<uint8_t*>(source_->base()), source_->layout(), src, 4, 17);
  auto handle = *receiver_->Expect(TransferExpectation{5, dst, 4});
  auto out = *sender_->Open(TransferTarget{descriptor_, 5, dst}, source_.get(), kFingerprint);
  const absl::Time start = clock_.Now();
  // Layers computed 10 ms apart, far slower than the link: each ships when written.
  for (int l = 0; l < 4; ++l) {
    ASSERT_TRUE(out->WriteLayer(l, src).ok());
    if (l < 3) clock_.Advance(absl::Milliseconds(10));
  }
  ASSERT_TRUE(out->Finish(absl::Seconds(10)).ok());
  EXPECT_NEAR(absl::ToDoubleMilliseconds(clock_.Now() - start), 30 + LayerMs(4) + link_.latency_ms,
              1e-3);
  ASSERT_TRUE(handle->Wait(absl::Seconds(5)).ok());
  EXPECT_EQ(CountMismatches(static_cast<uint8_t*>(pool_->base()), pool_->layout(), dst, 4, 17), 0);
}

TEST_F(PacedTransportTest, LayersWrittenFasterThanTheLinkQueueOnIt) {
  const std::vector<int32_t> src = {0, 1, 2, 3, 4, 5}, dst = {10, 11, 12, 13, 14, 15};
  auto handle = *receiver_->Expect(TransferExpectation{6, dst, 4});
  auto out = *sender_->Open(TransferTarget{descriptor_, 6, dst}, source_.get(), kFingerprint);
  const absl::Time start = clock_.Now();
  for (int l = 0; l < 4; ++l) ASSERT_TRUE(out->WriteLayer(l, src).ok());
  ASSERT_TRUE(out->Finish(absl::Seconds(10)).ok());
  EXPECT_NEAR(absl::ToDoubleMilliseconds(clock_.Now() - start), 4 * LayerMs(6) + link_.latency_ms,
              1e-3);
  EXPECT_TRUE(handle->Wait(absl::Seconds(5)).ok());
}

TEST_F(PacedTransportTest, TwoTransfersShareOneLinkAndATooShortTimeoutFails) {
  const std::vector<int32_t> src_a = {0, 1}, dst_a = {20, 21}, src_b = {2, 3}, dst_b = {22, 23};
  auto ha = *receiver_->Expect(TransferExpectation{7, dst_a, 4});
  auto hb = *receiver_->Expect(TransferExpectation{8, dst_b, 4});
  auto a = *sender_->Open(TransferTarget{descriptor_, 7, dst_a}, source_.get(), kFingerprint);
  auto b = *sender_->Open(TransferTarget{descriptor_, 8, dst_b}, source_.get(), kFingerprint);
  const absl::Time start = clock_.Now();
  for (int l = 0; l < 4; ++l) {
    ASSERT_TRUE(a->WriteLayer(l, src_a).ok());
    ASSERT_TRUE(b->WriteLayer(l, src_b).ok());
  }
  // b's last layer leaves after all eight layers of both.
  const double b_ms = 8 * LayerMs(2) + link_.latency_ms;
  EXPECT_EQ(b->Finish(absl::Microseconds(b_ms * 1e3 / 2)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(hb->done());
  ASSERT_TRUE(a->Finish(absl::Seconds(10)).ok());
  EXPECT_LE(absl::ToDoubleMilliseconds(clock_.Now() - start), b_ms + 1e-3);
  EXPECT_TRUE(ha->Wait(absl::Seconds(5)).ok());
  const LinkEmulation bad{.bytes_per_ms = 1, .latency_ms = 0, .byte_scale = 0};
  EXPECT_NE(bad.Validate().message().find("byte_scale"), std::string::npos);
}

}  // namespace
}  // namespace pdserve::kvtransfer
