#include "common/logging.h"

#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(LoggingTest, ParsesSeverities) {
  LogSeverity s;
  EXPECT_TRUE(ParseLogSeverity("WARNING", &s));
  EXPECT_EQ(s, LogSeverity::kWarning);
  EXPECT_TRUE(ParseLogSeverity("debug", &s));
  EXPECT_EQ(s, LogSeverity::kDebug);
  EXPECT_FALSE(ParseLogSeverity("loud", &s));
}

TEST(LoggingTest, FilteredMessagesAreNotEvaluated) {
  SetMinLogSeverity(LogSeverity::kError);
  int evaluated = 0;
  auto side_effect = [&] { return ++evaluated; };
  PDS_LOG(INFO) << side_effect();
  EXPECT_EQ(evaluated, 0);
  testing::internal::CaptureStderr();
  PDS_LOG(ERROR) << "visible " << side_effect();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(evaluated, 1);
  EXPECT_NE(err.find("logging_test.cc"), std::string::npos);
  EXPECT_NE(err.find("] visible 1\n"), std::string::npos);
  EXPECT_EQ(err[0], 'E');
  SetMinLogSeverity(LogSeverity::kInfo);
}

TEST(LoggingTest, EveryNSecondsLogsOnceInABurst) {
  testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) PDS_LOG_EVERY_N_SEC(WARNING, 60) << "burst";
  const std::string err = testing::internal::GetCapturedStderr();
  size_t count = 0;
  for (size_t pos = err.find("burst"); pos != std::string::npos; pos = err.find("burst", pos + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 1u);
}

TEST(LoggingDeathTest, CheckAbortsWithMessage) {
  EXPECT_DEATH(PDS_CHECK(1 + 1 == 3) << "arithmetic", "Check failed: 1 \\+ 1 == 3 arithmetic");
}

}  // namespace
}  // namespace pdserve
