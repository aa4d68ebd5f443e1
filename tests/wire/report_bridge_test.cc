#include "wire/report_bridge.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace pdserve::wire {
namespace {

TEST(ReportBridgeTest, APrefillsMeasurementsCrossThePrefillAnswerUnchanged) {
  const PrefillMeasurement measured{.queue_ms = 1.5,
                                    .compute_ms = 42.25,
                                    .transfer_ms = 40,
                                    .transfer_tail_ms = 0.75,
                                    .transfer_bytes = uint64_t{3} << 33,
                                    .computed_tokens = 4096};
  v1::PrefillResponse response;
  MeasurementToProto(measured, &response);
  const PrefillMeasurement back = MeasurementFromProto(response);
  EXPECT_EQ(back.queue_ms, 1.5);
  EXPECT_EQ(back.compute_ms, 42.25);
  EXPECT_EQ(back.transfer_ms, 40);
  EXPECT_EQ(back.transfer_tail_ms, 0.75);
  EXPECT_EQ(back.transfer_bytes, uint64_t{3} << 33);
  EXPECT_EQ(back.computed_tokens, 4096);
}

TEST(ReportBridgeTest, AForgedTokenCountIsClampedNotWrapped) {
  v1::PrefillResponse response;
  response.set_computed_tokens(UINT32_MAX);
  EXPECT_EQ(MeasurementFromProto(response).computed_tokens, INT32_MAX);
  v1::PrefillResponse out;
  MeasurementToProto(PrefillMeasurement{.computed_tokens = -5}, &out);
  EXPECT_EQ(out.computed_tokens(), 0u);
}

TEST(ReportBridgeTest, AReportsLoadAndStepsReachTheWire) {
  WorkerReport report;
  report.load.running = 4;
  report.load.pending_prefill_tokens = 900;
  report.load.prefill_tokens_per_second = 5000;
  report.load.draining = true;
  report.steps.push_back(StepObservation{.num_decode = 3, .duration_ms = 12});
  v1::LoadReport out;
  ReportToProto(report, &out);
  EXPECT_EQ(out.running(), 4u);
  EXPECT_EQ(out.pending_prefill_tokens(), 900u);
  EXPECT_EQ(out.prefill_tokens_per_second(), 5000);
  EXPECT_TRUE(out.draining());
  ASSERT_EQ(out.recent_steps_size(), 1);
  EXPECT_EQ(out.recent_steps(0).num_decode(), 3u);
  const WorkerReport back = ReportFromProto(out);
  EXPECT_EQ(back.load.running, 4);
  EXPECT_TRUE(back.load.draining);
  ASSERT_EQ(back.steps.size(), 1u);
  EXPECT_EQ(back.steps[0].duration_ms, 12);
}

}  // namespace
}  // namespace pdserve::wire
