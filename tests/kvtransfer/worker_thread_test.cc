// UcxWorkerThread::RunSync: results come back through state the call owns, and a call that
// timed out still runs later on copies of its arguments, never on the caller's (by then
// dead) stack frame; under ASan (the unit tests' CI run) any such access would be reported.
#include "kvtransfer/ucx/worker_thread.h"

#include <atomic>
#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace pdserve::kvtransfer {
namespace {

class WorkerThreadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ucp_config_t* config = nullptr;
    ASSERT_EQ(ucp_config_read(nullptr, nullptr, &config), UCS_OK);
    ucp_config_modify(config, "TLS", "shm");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    ASSERT_EQ(ucp_init(&params, config, &context_), UCS_OK);
    ucp_config_release(config);
    auto thread = UcxWorkerThread::Start(context_, [](ucp_worker_h) { return absl::OkStatus(); });
    ASSERT_TRUE(thread.ok()) << thread.status();
    thread_ = *std::move(thread);
  }
  void TearDown() override {
    thread_.reset();
    if (context_ != nullptr) ucp_cleanup(context_);
  }
  ucp_context_h context_ = nullptr;
  std::unique_ptr<UcxWorkerThread> thread_;
};

struct LateCall {
  std::atomic<bool> ran{false};
  std::string seen;
};

// Times out a call whose argument lives in this function's frame, then returns (the frame
// is gone when the call finally runs).
absl::StatusOr<size_t> TimedOutCall(UcxWorkerThread* thread, std::shared_ptr<LateCall> late) {
  std::string on_this_stack(64, 'x');
  return thread->RunSync(
      absl::Milliseconds(50),
      +[](std::string copy, std::shared_ptr<LateCall> record) -> absl::StatusOr<size_t> {
        record->seen = copy;
        record->ran = true;
        return copy.size();
      },
      on_this_stack, late);
}

TEST_F(WorkerThreadTest, ResultsComeBackAndATimedOutCallRunsOnItsOwnCopies) {
  const absl::StatusOr<int> sum = thread_->RunSync(
      absl::Seconds(5), +[](int a, int b) -> absl::StatusOr<int> { return a + b; }, 2, 3);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, 5);

  // Hold the worker thread until the call below has timed out and its caller has returned.
  auto release = std::make_shared<absl::Notification>();
  thread_->Post([release] { release->WaitForNotificationWithTimeout(absl::Seconds(10)); });
  auto late = std::make_shared<LateCall>();
  const absl::StatusOr<size_t> timed_out = TimedOutCall(thread_.get(), late);
  EXPECT_EQ(timed_out.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(late->ran.load());
  release->Notify();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!late->ran.load() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_TRUE(late->ran.load());
  EXPECT_EQ(late->seen, std::string(64, 'x'));

  // From the worker thread itself, a call runs inline.
  auto inline_result = std::make_shared<absl::StatusOr<int>>(absl::UnknownError("not run"));
  auto done = std::make_shared<absl::Notification>();
  UcxWorkerThread* thread = thread_.get();
  thread_->Post([thread, inline_result, done] {
    *inline_result = thread->RunSync(
        absl::Milliseconds(1), +[]() -> absl::StatusOr<int> { return 7; });
    done->Notify();
  });
  ASSERT_TRUE(done->WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(*inline_result, absl::StatusOr<int>(7));
}

}  // namespace
}  // namespace pdserve::kvtransfer
