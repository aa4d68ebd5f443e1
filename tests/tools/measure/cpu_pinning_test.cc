#include "tools/measure/cpu_pinning.h"

#include <sched.h>

#include <thread>

#include "gtest/gtest.h"

namespace pdserve::measure {
namespace {

// The CPUs this process may run on now.
std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

TEST(CpuPinningTest, ThePinnedThreadAndTheThreadsItStartsRunOnlyThere) {
  // In a thread of its own, so that the test's main thread keeps its CPUs.
  std::thread([] {
    const std::vector<int> before = AllowedCpus();
    ASSERT_FALSE(before.empty());
    const std::vector<int> one = {before.back()};
    ASSERT_TRUE(PinThisThread("cpus", one).ok());
    EXPECT_EQ(AllowedCpus(), one);
    std::vector<int> child;
    std::thread([&] { child = AllowedCpus(); }).join();
    EXPECT_EQ(child, one);
  }).join();
}

TEST(CpuPinningTest, NothingChangesForNoCpus) {
  const std::vector<int> before = AllowedCpus();
  ASSERT_TRUE(PinThisThread("cpus", {}).ok());
  EXPECT_EQ(AllowedCpus(), before);
}

TEST(CpuPinningTest, ACpuOutOfRangeIsRefusedNamingTheFlag) {
  const std::vector<int> before = AllowedCpus();
  const absl::Status negative = PinThisThread("router_cpus", {-1});
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(negative.message().find("--router_cpus: -1"), std::string::npos) << negative;
  const absl::Status huge = PinThisThread("cpus", {CPU_SETSIZE});
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(huge.message().find("--cpus"), std::string::npos) << huge;
  EXPECT_EQ(AllowedCpus(), before);
}

}  // namespace
}  // namespace pdserve::measure
