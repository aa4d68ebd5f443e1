#include "engine/cpu/cpu_isa.h"

#include <cstdlib>

#include "engine/model_loader.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace pdserve::engine {
namespace {

// Sets (or clears) $PDSERVE_MAX_CPU_ISA for one test and restores it after.
class ScopedMaxIsa {
 public:
  explicit ScopedMaxIsa(const char* value) {
    if (const char* old = std::getenv(kMaxCpuIsaEnv)) old_ = old;
    if (value == nullptr) {
      unsetenv(kMaxCpuIsaEnv);
    } else {
      setenv(kMaxCpuIsaEnv, value, 1);
    }
  }
  ~ScopedMaxIsa() {
    if (old_.has_value()) {
      setenv(kMaxCpuIsaEnv, old_->c_str(), 1);
    } else {
      unsetenv(kMaxCpuIsaEnv);
    }
  }

 private:
  std::optional<std::string> old_;
};

TEST(CpuIsaTest, NamesParseBackAndUnknownOnesNameTheFlagAndTheChoices) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kNeon}) {
    auto parsed = ParseCpuIsa(CpuIsaName(isa));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, isa);
  }
  auto bad = ParseCpuIsa("sse9", "cpu_isa");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--cpu_isa: 'sse9'"), absl::string_view::npos);
  EXPECT_NE(bad.status().message().find("avx2"), absl::string_view::npos);
}

TEST(CpuIsaTest, EverySupportedSetIncludesScalarAndTheBestComesFirst) {
  const std::vector<CpuIsa> supported = SupportedCpuIsas();
  ASSERT_FALSE(supported.empty());
  EXPECT_EQ(supported.front(), BestCpuIsa());
  EXPECT_EQ(supported.back(), CpuIsa::kScalar);
  for (CpuIsa isa : supported) EXPECT_TRUE(CheckCpuSupports(isa).ok()) << CpuIsaName(isa);
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kNeon}) {
    if (CpuSupports(isa)) continue;
    const absl::Status missing = CheckCpuSupports(isa);
    EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(missing.message().find("lacks"), absl::string_view::npos) << missing;
  }
}

TEST(CpuIsaTest, TheEnvironmentCapsAutoButNeverRaisesIt) {
  {
    ScopedMaxIsa unset(nullptr);
    EXPECT_EQ(*ParseCpuIsa("auto"), BestCpuIsa());
  }
  {
    ScopedMaxIsa scalar("scalar");
    EXPECT_EQ(*ParseCpuIsa("auto"), CpuIsa::kScalar);
    // An explicit choice is not capped.
    EXPECT_EQ(*ParseCpuIsa("avx2"), CpuIsa::kAvx2);
  }
  {
    ScopedMaxIsa avx512("avx512");  // Above this CPU's best, if it lacks AVX-512: its best.
    EXPECT_EQ(*ParseCpuIsa("auto"), BestCpuIsa());
  }
  {
    // Another architecture's set caps nothing: x86 under "neon", Arm under "avx2".
    const bool arm = CpuSupports(CpuIsa::kNeon);
    ScopedMaxIsa foreign(arm ? "avx2" : "neon");
    EXPECT_EQ(*ParseCpuIsa("auto"), BestCpuIsa());
  }
  {
    ScopedMaxIsa bad("avx1024");
    auto parsed = ParseCpuIsa("auto");
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.status().message().find("PDSERVE_MAX_CPU_ISA: 'avx1024'"),
              absl::string_view::npos)
        << parsed.status();
  }
}

TEST(CpuIsaTest, AModelRunsOnTheChosenSetAndRefusesOneTheCpuLacks) {
  const std::string dir = pdserve::testing::TestModelDir("micro");
  for (CpuIsa isa : SupportedCpuIsas()) {
    auto loaded = LoadModel(dir, EngineOptions{.num_threads = 1, .cpu_isa = CpuIsaName(isa)});
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->model->instruction_set(), CpuIsaName(isa));
  }
  auto bad = LoadModel(dir, EngineOptions{.num_threads = 1, .cpu_isa = "avx3"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  if (!CpuSupports(CpuIsa::kAvx512)) {
    auto lacking = LoadModel(dir, EngineOptions{.num_threads = 1, .cpu_isa = "avx512"});
    EXPECT_EQ(lacking.status().code(), absl::StatusCode::kFailedPrecondition);
  }
}

}  // namespace
}  // namespace pdserve::engine
