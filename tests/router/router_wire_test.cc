// The router's proto <-> domain edge (registrations convert in wire/, report_bridge_test):
// reports carry their steps and prefix events, and a Placement becomes the v1::Placement the decode
// worker and the client read (primary prefill worker, alternates, mode).
#include "router/router_wire.h"

#include "gtest/gtest.h"
#include "wire/report_bridge.h"

namespace pdserve::router {
namespace {

TEST(RouterWireTest, ReportsCarryTheirStepsAndPrefixEvents) {
  v1::LoadReport r;
  r.set_running(3);
  r.set_waiting(2);
  r.set_free_blocks(77);
  r.set_pending_prefill_tokens(1234);
  r.set_context_tokens(56789);
  v1::StepSample* s = r.add_recent_steps();
  s->set_num_decode(4);
  s->set_num_prefill_tokens(128);
  s->set_context_tokens(9000);
  s->set_prefill_context_tokens(8256);
  s->set_duration_ms(12.5);
  // A forged share larger than the whole is clamped to it.
  v1::StepSample* forged = r.add_recent_steps();
  forged->set_context_tokens(100);
  forged->set_prefill_context_tokens(1000);
  const WorkerReport report = wire::ReportFromProto(r);
  EXPECT_EQ(report.load.running, 3);
  EXPECT_EQ(report.load.waiting, 2);
  EXPECT_EQ(report.load.free_blocks, 77);
  EXPECT_EQ(report.load.pending_prefill_tokens, 1234);
  EXPECT_EQ(report.load.context_tokens, 56789);
  v1::LoadReport back;
  wire::LoadToProto(report.load, &back);
  EXPECT_EQ(back.context_tokens(), 56789u);
  ASSERT_EQ(report.steps.size(), 2u);
  EXPECT_EQ(report.steps[0].num_prefill_tokens, 128);
  EXPECT_EQ(report.steps[0].context_tokens, 9000);
  EXPECT_EQ(report.steps[0].prefill_context_tokens, 8256);
  EXPECT_EQ(report.steps[1].prefill_context_tokens, 100);
  EXPECT_DOUBLE_EQ(report.steps[0].duration_ms, 12.5);

  v1::PrefixCacheEvents e;
  e.set_reset(true);
  e.add_stored(1);
  e.add_stored(2);
  e.add_evicted(3);
  const PrefixCacheUpdate u = PrefixUpdateFromProto(e);
  EXPECT_TRUE(u.reset);
  EXPECT_EQ(u.stored, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(u.evicted, (std::vector<uint64_t>{3}));
}

TEST(RouterWireTest, PlacementsBecomeWhatDecodeWorkersAndClientsRead) {
  Placement p;
  p.decode = {"decode-1", "10.0.0.1:5000"};
  p.offload = true;
  p.prefill = {{"prefill-1", "10.0.0.2:5000"}, {"prefill-2", "10.0.0.3:5000"}};
  p.reason = "interference_exceeds_transfer";
  p.policy = "cost_model";
  p.uncached_tokens = 3000;
  p.running_decodes = 12;
  p.predicted_ttft_offload_ms = 150;
  v1::Placement out;
  PlacementToProto(p, &out);
  EXPECT_EQ(out.decode_worker_id(), "decode-1");
  EXPECT_EQ(out.mode(), v1::PLACEMENT_MODE_OFFLOAD);
  EXPECT_EQ(out.prefill_worker_id(), "prefill-1");
  ASSERT_EQ(out.alternate_prefill_worker_ids_size(), 1);
  EXPECT_EQ(out.alternate_prefill_worker_ids(0), "prefill-2");
  EXPECT_EQ(out.uncached_tokens(), 3000u);
  EXPECT_EQ(out.running_decodes(), 12u);
  EXPECT_DOUBLE_EQ(out.predicted_ttft_offload_ms(), 150);

  DecisionRecord record{.request_id = "r1",
                        .model = "m",
                        .prompt_tokens = 3100,
                        .placement = p,
                        .time = absl::FromUnixSeconds(1000),
                        .decision_us = 7};
  v1::DecisionRecord proto;
  DecisionRecordToProto(record, &proto);
  EXPECT_EQ(proto.time_unix_nanos(), int64_t{1000} * 1000 * 1000 * 1000);
  EXPECT_EQ(proto.placement().prefill_worker_id(), "prefill-1");
  EXPECT_EQ(proto.prompt_tokens(), 3100u);
}

}  // namespace
}  // namespace pdserve::router
