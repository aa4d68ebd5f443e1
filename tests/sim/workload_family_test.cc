// The synthetic workload family: cells parse back from their names, windows are deterministic
// and keep each cell's shape (lengths in range, follow-ups after their turns, shared system
// prompts, burstier gaps than Poisson).
#include "sim/workload_family.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "gtest/gtest.h"

namespace pdserve::sim {
namespace {

constexpr int kVocab = 32000;
constexpr int kContext = 32768;

double GapCv(const std::vector<SimRequest>& r) {
  std::vector<double> gaps;
  for (size_t i = 1; i < r.size(); ++i) gaps.push_back(r[i].arrival_s - r[i - 1].arrival_s);
  double mean = 0, var = 0;
  for (double g : gaps) mean += g / gaps.size();
  for (double g : gaps) var += (g - mean) * (g - mean) / gaps.size();
  return std::sqrt(var) / mean;
}

TEST(WorkloadFamilyTest, EveryCellParsesBackFromItsName) {
  const std::vector<WorkloadCell> full = FullFamily();
  EXPECT_EQ(full.size(), 72u);
  std::set<std::string> names;
  for (const WorkloadCell& c : full) {
    names.insert(c.Name());
    auto parsed = ParseWorkloadCell(c.Name());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->Name(), c.Name());
  }
  EXPECT_EQ(names.size(), 72u);
  for (const WorkloadCell& c : SmokeFamily()) EXPECT_TRUE(names.contains(c.Name()));
  EXPECT_FALSE(ParseWorkloadCell("long/tiny/none").ok());
  auto bad = ParseWorkloadCell("long/tiny/none/weekly");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("arrivals 'weekly'"), absl::string_view::npos);
}

TEST(WorkloadFamilyTest, AWindowIsDeterministicAndKeepsItsShape) {
  const WorkloadCell cell = *ParseWorkloadCell("long/tiny/none/poisson");
  const auto a = FamilyRequests(cell, 2000, 7, kVocab, kContext);
  const auto b = FamilyRequests(cell, 2000, 7, kVocab, kContext);
  ASSERT_EQ(a.size(), 2000u);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].prompt, b[i].prompt);
    ASSERT_EQ(a[i].arrival_s, b[i].arrival_s);
    EXPECT_GE(a[i].prompt.size(), 1024u);
    EXPECT_LE(a[i].prompt.size(), 12000u);
    EXPECT_GE(a[i].max_tokens, 1);
    EXPECT_LE(a[i].max_tokens, 16);
    EXPECT_EQ(a[i].kind, "long/tiny/none/poisson");
    for (int32_t t : a[i].prompt) ASSERT_TRUE(t >= 0 && t < kVocab);
  }
  EXPECT_NE(FamilyRequests(cell, 10, 8, kVocab, kContext)[0].prompt, a[0].prompt);
  // One request a second on average.
  EXPECT_NEAR(a.back().arrival_s / 2000, 1.0, 0.1);
  EXPECT_NEAR(GapCv(a), 1.0, 0.15);
  const auto bursty =
      FamilyRequests(*ParseWorkloadCell("long/tiny/none/bursty"), 2000, 7, kVocab, kContext);
  EXPECT_GT(GapCv(bursty), 2.0);
}

TEST(WorkloadFamilyTest, MultiTurnFollowUpsAndSystemPromptsShareTheirPrefixes) {
  const auto turns = FamilyRequests(*ParseWorkloadCell("short/medium/multiturn/poisson"), 1000, 3,
                                    kVocab, kContext);
  int follow_ups = 0;
  for (size_t i = 0; i < turns.size(); ++i) {
    if (turns[i].follow_up_of < 0) continue;
    ++follow_ups;
    EXPECT_LT(turns[i].follow_up_of, static_cast<int>(i));  // After the turn it continues.
  }
  EXPECT_GT(follow_ups, 200);
  const auto system =
      FamilyRequests(*ParseWorkloadCell("bimodal/medium/system/poisson"), 400, 3, kVocab, kContext);
  std::set<std::vector<int32_t>> prefixes;
  for (const SimRequest& r : system) {
    ASSERT_GT(r.prompt.size(), 1024u);
    prefixes.insert(std::vector<int32_t>(r.prompt.begin(), r.prompt.begin() + 1024));
  }
  EXPECT_EQ(prefixes.size(), 4u);
}

TEST(WorkloadFamilyTest, LengthsStayWithinTheContext) {
  for (const WorkloadCell& c : FullFamily()) {
    for (const SimRequest& r : FamilyRequests(c, 300, 1, kVocab, 4096)) {
      EXPECT_LE(static_cast<int>(r.prompt.size()) + r.max_tokens, 4096) << c.Name();
    }
  }
}

}  // namespace
}  // namespace pdserve::sim
