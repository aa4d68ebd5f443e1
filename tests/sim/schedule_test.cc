// Schedules of workload phases (sim/schedule.h): parsing names what is wrong, each phase
// brings its cell at its rate for its time with its phase number, the work bound of a timeline
// is its tightest phase's, and attainment is judged per phase.
#include "sim/schedule.h"

#include "gtest/gtest.h"
#include "sim/sim_summary.h"
#include "sim/work_bound.h"

namespace pdserve::sim {
namespace {

TEST(ScheduleTest, ParsesPhasesAndNamesWhatIsWrong) {
  auto phases = ParseSchedule("short/medium/none/poisson@20:60, long/tiny/none/bursty@2.5:30");
  ASSERT_TRUE(phases.ok()) << phases.status();
  ASSERT_EQ(phases->size(), 2u);
  EXPECT_EQ((*phases)[1].cell.Name(), "long/tiny/none/bursty");
  EXPECT_EQ((*phases)[1].rate, 2.5);
  EXPECT_EQ((*phases)[1].duration_s, 30);
  struct Case {
    const char* text;
    const char* names;
  };
  for (const Case& c :
       {Case{"", "no phase"}, Case{"short/medium/none/poisson:20:60", "phase 1"},
        Case{"short/medium/none/poisson@0:60", "RATE"},
        Case{"short/medium/none/poisson@1:x", "SECONDS"},
        Case{"short/medium/none/poisson@1:60,tall/medium/none/poisson@1:60", "phase 2"},
        Case{"short/medium/none/poisson@1000:2000", "1,000,000"}}) {
    auto bad = ParseSchedule(c.text);
    ASSERT_FALSE(bad.ok()) << c.text;
    EXPECT_NE(bad.status().message().find(c.names), std::string::npos) << bad.status();
    EXPECT_NE(bad.status().message().find("--schedule"), std::string::npos) << bad.status();
  }
}

TEST(ScheduleTest, EachPhaseBringsItsCellAtItsRateForItsTime) {
  auto phases = ParseSchedule(
      "short/medium/multiturn/poisson@10:40,short/medium/multiturn/poisson@30:40,"
      "long/tiny/none/poisson@5:40");
  ASSERT_TRUE(phases.ok());
  const std::vector<SimRequest> requests = ScheduleRequests(*phases, 3, 32000, 32768);
  int count[3] = {0, 0, 0};
  double first[3] = {1e9, 1e9, 1e9}, last[3] = {0, 0, 0};
  for (size_t i = 0; i < requests.size(); ++i) {
    const SimRequest& r = requests[i];
    ASSERT_GE(r.phase, 0);
    ASSERT_LT(r.phase, 3);
    ++count[r.phase];
    if (r.follow_up_of >= 0) {
      ASSERT_LT(r.follow_up_of, static_cast<int>(i));
      EXPECT_EQ(requests[r.follow_up_of].phase, r.phase) << "a conversation stays in its phase";
      continue;
    }
    first[r.phase] = std::min(first[r.phase], r.arrival_s);
    last[r.phase] = std::max(last[r.phase], r.arrival_s);
  }
  EXPECT_EQ(count[0], 400);
  EXPECT_EQ(count[1], 1200);
  EXPECT_EQ(count[2], 200);
  for (int p = 0; p < 3; ++p) {
    EXPECT_GE(first[p], 40.0 * p) << p;
    EXPECT_LT(last[p], 40.0 * (p + 1) + 5) << p;
  }
  // The same seed gives the same requests; another, others.
  EXPECT_EQ(ScheduleRequests(*phases, 3, 32000, 32768)[500].prompt, requests[500].prompt);
  EXPECT_NE(ScheduleRequests(*phases, 4, 32000, 32768)[500].prompt, requests[500].prompt);
}

TEST(ScheduleTest, ATimelinesWorkBoundIsItsTightestPhases) {
  SimProfile profile;
  profile.shape.kv_layout.block_size = 16;
  profile.timing.step_intercept_ms = 5;
  profile.timing.step_per_decode_ms = 0.02;
  profile.timing.step_per_attention_ms = 4e-5;
  // The same cell at 10/s then 30/s: the second phase's work caps the timeline, whose mean rate
  // is 20/s: at most its bound x 20 / 30 in units of the mean rate.
  auto swing = ParseSchedule("short/medium/none/poisson@10:60,short/medium/none/poisson@30:60");
  ASSERT_TRUE(swing.ok());
  const std::vector<SimRequest> requests = ScheduleRequests(*swing, 5, 32000, 32768);
  const WorkBound timeline = ComputeWorkBound(requests, profile, 25);
  std::vector<SimRequest> flat = requests;
  for (SimRequest& r : flat) r.phase = 0;
  const WorkBound one = ComputeWorkBound(flat, profile, 25);
  EXPECT_NEAR(timeline.per_gpu / one.per_gpu, 20.0 / 30.0, 0.05);
  EXPECT_NEAR(timeline.prefill_ms, one.prefill_ms, 1e-9) << "the same work in all";
}

TEST(ScheduleTest, AttainmentIsJudgedPerPhase) {
  SimResult result;
  for (int i = 0; i < 20; ++i) {
    SimRequestResult r;
    r.ok = true;
    r.phase = i < 10 ? 0 : 1;
    r.ttft_ms = i < 10 ? 100 : (i < 17 ? 3000 : 100);  // Phase 1: 3 of 10 in time.
    r.tpot_ms = 10;
    result.requests.push_back(r);
  }
  const PointSummary s = Summarize(result, 1, router::SloConfig{.ttft_ms = 2000, .tpot_ms = 25});
  EXPECT_NEAR(s.attainment, 0.65, 1e-9);
  EXPECT_NEAR(s.phase_attainment.at(0), 1.0, 1e-9);
  EXPECT_NEAR(s.phase_attainment.at(1), 0.3, 1e-9);
  EXPECT_NEAR(s.worst_phase_attainment, 0.3, 1e-9);
}

}  // namespace
}  // namespace pdserve::sim
