// KV transfer between real processes over UCX (shared memory and TCP on loopback): the test
// process is the receiver; senders are pdserve-kv-test-sender children.
#include <signal.h>
#include <sys/wait.h>

#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "kvtransfer/descriptor_codec.h"
#include "kvtransfer/ucx/ucx_transport.h"
#include "server/child_process.h"
#include "tests/kvtransfer/kv_test_data.h"

namespace pdserve::kvtransfer {
namespace {

using pdserve::ChildOptions;
using pdserve::ChildProcess;

constexpr uint64_t kFingerprint = 0xABCDEF;

class MultiProcessTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    UcxTransportConfig config;
    config.transports = GetParam();
    if (GetParam() == "tcp") config.net_devices = "lo";
    auto t = UcxTransport::Create(config);
    ASSERT_TRUE(t.ok()) << t.status();
    receiver_ = *std::move(t);
    KvLayout layout = testing::TestLayout(256, DType::kF16);
    layout.num_layers = 6;
    layout.head_dim = 64;  // 2 KiB regions.
    auto pool = receiver_->CreatePool(layout);
    ASSERT_TRUE(pool.ok());
    pool_ = *std::move(pool);
    auto d = receiver_->ServePool(pool_.get(), "decode-test", kFingerprint, 1234);
    ASSERT_TRUE(d.ok());
    descriptor_hex_ = ToHex(EncodeDescriptor(*d));
  }
  void TearDown() override {
    pool_.reset();
    receiver_.reset();
  }

  std::unique_ptr<ChildProcess> StartSender(uint64_t token, const std::vector<int32_t>& blocks,
                                            uint64_t seed, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        absl::StrCat("--descriptor=", descriptor_hex_),        absl::StrCat("--token=", token),
        absl::StrCat("--blocks=", absl::StrJoin(blocks, ",")), absl::StrCat("--seed=", seed),
        absl::StrCat("--layers=", pool_->layout().num_layers), absl::StrCat("--tls=", GetParam()),
        absl::StrCat("--fingerprint=", kFingerprint)};
    if (GetParam() == "tcp") args.push_back("--net_devices=lo");
    for (auto& e : extra) args.push_back(e);
    auto child = ChildProcess::Start(ChildOptions{
        .binary = "pdserve-kv-test-sender", .args = args, .expect_serving_info = false});
    EXPECT_TRUE(child.ok()) << child.status();
    return *std::move(child);
  }

  std::unique_ptr<UcxTransport> receiver_;
  std::unique_ptr<LocalPool> pool_;
  std::string descriptor_hex_;
};

TEST_P(MultiProcessTest, FourConcurrentSendersIntoOneReceiver) {
  std::vector<int32_t> all(256);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(7));
  std::vector<std::vector<int32_t>> blocks(4);
  std::vector<std::shared_ptr<InboundTransfer>> handles;
  std::vector<std::unique_ptr<ChildProcess>> senders;
  for (int i = 0; i < 4; ++i) {
    blocks[i].assign(all.begin() + i * 24, all.begin() + (i + 1) * 24);
    auto h =
        receiver_->Expect(TransferExpectation{100u + i, blocks[i], pool_->layout().num_layers});
    ASSERT_TRUE(h.ok()) << h.status();
    handles.push_back(*h);
  }
  for (int i = 0; i < 4; ++i) senders.push_back(StartSender(100 + i, blocks[i], 1000 + i));
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(handles[i]->Wait(absl::Seconds(60)).ok())
        << handles[i]->status() << senders[i]->Log();
    auto exit = senders[i]->WaitExit(absl::Seconds(30));
    ASSERT_TRUE(exit.has_value());
    EXPECT_EQ(WEXITSTATUS(*exit), 0) << senders[i]->Log();
    EXPECT_EQ(testing::CountMismatches(static_cast<uint8_t*>(pool_->base()), pool_->layout(),
                                       blocks[i], pool_->layout().num_layers, 1000 + i),
              0)
        << "sender " << i;
  }
  const std::string path = GetParam() == "shm" ? "via put" : "via am";
  EXPECT_NE(senders[0]->Log().find(path), std::string::npos) << senders[0]->Log();
  EXPECT_EQ(receiver_->counters().transfers_completed, 4u);
}

TEST_P(MultiProcessTest, KilledSenderFailsItsWaitWhileOthersComplete) {
  const std::vector<int32_t> doomed = {10, 11, 12, 13, 50, 51};
  const std::vector<int32_t> healthy = {20, 21, 22, 60, 61, 62};
  auto doomed_handle =
      receiver_->Expect(TransferExpectation{200, doomed, pool_->layout().num_layers});
  auto healthy_handle =
      receiver_->Expect(TransferExpectation{201, healthy, pool_->layout().num_layers});
  ASSERT_TRUE(doomed_handle.ok() && healthy_handle.ok());
  auto killed = StartSender(200, doomed, 5, {"--hold_after_layers=2"});
  // Wait until it reported two layers, then kill it mid-transfer.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((*doomed_handle)->layers_done() < 2 && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ((*doomed_handle)->layers_done(), 2) << killed->Log();
  auto healthy_sender = StartSender(201, healthy, 6, {"--layer_delay=20ms"});
  killed->Kill();
  const absl::Time wait_start = absl::Now();
  const absl::Status s = (*doomed_handle)->Wait(absl::Seconds(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - wait_start, absl::Seconds(3));
  EXPECT_TRUE((*healthy_handle)->Wait(absl::Seconds(60)).ok()) << healthy_sender->Log();
  EXPECT_EQ(testing::CountMismatches(static_cast<uint8_t*>(pool_->base()), pool_->layout(), healthy,
                                     pool_->layout().num_layers, 6),
            0);
  // The control plane gives up on the dead transfer; its blocks can be reserved again.
  receiver_->Release(200);
  EXPECT_TRUE(receiver_->Expect(TransferExpectation{202, doomed, pool_->layout().num_layers}).ok());
}

TEST_P(MultiProcessTest, LargeRunsUseRendezvousAndAreCountedExactly) {
  // 64 adjacent blocks: 128 KiB runs, above every eager threshold, so TCP uses rendezvous
  // (whose sends can complete after an endpoint flush) and the byte count must still add up.
  std::vector<int32_t> blocks(64);
  std::iota(blocks.begin(), blocks.end(), 100);
  auto handle = receiver_->Expect(TransferExpectation{300, blocks, pool_->layout().num_layers});
  ASSERT_TRUE(handle.ok());
  auto sender = StartSender(300, blocks, 77);
  ASSERT_TRUE((*handle)->Wait(absl::Seconds(60)).ok()) << (*handle)->status() << sender->Log();
  auto exit = sender->WaitExit(absl::Seconds(30));
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(WEXITSTATUS(*exit), 0) << sender->Log();
  EXPECT_EQ(testing::CountMismatches(static_cast<uint8_t*>(pool_->base()), pool_->layout(), blocks,
                                     pool_->layout().num_layers, 77),
            0);
}

INSTANTIATE_TEST_SUITE_P(Ucx, MultiProcessTest, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace pdserve::kvtransfer
