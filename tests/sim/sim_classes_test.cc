// Workloads that mix SLO classes: the classes parse (or fail naming the flag), requests get one
// by share with follow-ups keeping their conversation's, and attainment is reported per class
// with the lowest one deciding goodput.
#include <map>

#include "gtest/gtest.h"
#include "sim/sim_summary.h"
#include "sim/sim_workload.h"

namespace pdserve::sim {
namespace {

TEST(SloClassesTest, ParseNamesTheFlagAndThePartAtFault) {
  auto classes = ParseSloClasses("interactive:1000:25:0.5,batch:10000:100:1.5");
  ASSERT_TRUE(classes.ok()) << classes.status();
  ASSERT_EQ(classes->size(), 2u);
  EXPECT_EQ((*classes)[1].name, "batch");
  EXPECT_EQ((*classes)[1].slo.ttft_ms, 10000);
  EXPECT_EQ((*classes)[1].slo.tpot_ms, 100);
  EXPECT_EQ((*classes)[1].share, 1.5);
  EXPECT_TRUE(ParseSloClasses("")->empty());
  for (const char* bad : {"a:1:2", "a:1:2:0", "a:-1:2:1", ":1:2:1", "a:x:2:1", "a:1:2:1,a:3:4:1"}) {
    auto parsed = ParseSloClasses(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("--slo_classes"), absl::string_view::npos) << bad;
  }
}

TEST(SloClassesTest, RequestsGetClassesByShareAndFollowUpsKeepTheirs) {
  std::vector<SimRequest> requests(4000);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].arrival_s = static_cast<double>(i);
    if (i % 4 == 3) requests[i].follow_up_of = static_cast<int>(i) - 1;
  }
  const auto classes = *ParseSloClasses("interactive:1000:25:1,batch:10000:100:3");
  AssignSloClasses(classes, 5, &requests);
  std::map<std::string, int> count;
  for (size_t i = 0; i < requests.size(); ++i) {
    const SimRequest& r = requests[i];
    ++count[r.slo_class];
    ASSERT_TRUE(r.slo.has_value());
    EXPECT_EQ(r.slo->ttft_ms, r.slo_class == "interactive" ? 1000 : 10000);
    if (r.follow_up_of >= 0) {
      EXPECT_EQ(r.slo_class, requests[r.follow_up_of].slo_class);
    }
  }
  EXPECT_NEAR(count["interactive"] / 4000.0, 0.25, 0.03);
  EXPECT_NEAR(count["batch"] / 4000.0, 0.75, 0.03);
}

TEST(SloClassesTest, TheWorstClassIsReportedBesideTheOverallAttainment) {
  SimResult result;
  auto add = [&](const std::string& cls, double ttft_ms, double slo_ttft_ms) {
    SimRequestResult r;
    r.ok = true;
    r.ttft_ms = ttft_ms;
    r.slo = router::SloConfig{.ttft_ms = slo_ttft_ms, .tpot_ms = 100};
    r.slo_class = cls;
    result.requests.push_back(r);
  };
  // 8 batch requests all met; 2 interactive, one met: 0.9 overall, 0.5 for interactive.
  for (int i = 0; i < 8; ++i) add("batch", 5000, 10000);
  add("interactive", 500, 1000);
  add("interactive", 1500, 1000);
  const PointSummary s = Summarize(result, 1, router::SloConfig{});
  EXPECT_DOUBLE_EQ(s.attainment, 0.9);
  EXPECT_DOUBLE_EQ(s.class_attainment.at("batch"), 1.0);
  EXPECT_DOUBLE_EQ(s.class_attainment.at("interactive"), 0.5);
  EXPECT_DOUBLE_EQ(s.worst_class_attainment, 0.5);
  // Without classes the worst class is the overall attainment.
  for (SimRequestResult& r : result.requests) r.slo_class.clear();
  EXPECT_DOUBLE_EQ(Summarize(result, 1, router::SloConfig{}).worst_class_attainment, 0.9);
}

}  // namespace
}  // namespace pdserve::sim
