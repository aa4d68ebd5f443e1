#include "wire/report_bridge.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace pdserve::wire {
namespace {

v1::WorkerRegistration Registration() {
  v1::WorkerRegistration r;
  r.set_worker_id("decode-1");
  r.set_role(v1::WORKER_ROLE_DECODE);
  r.set_grpc_address("10.0.0.1:5000");
  r.set_metrics_address("10.0.0.1:9000");
  r.set_model("m");
  r.set_model_fingerprint(0xabc);
  v1::KvLayout* l = r.mutable_kv_layout();
  l->set_num_layers(4);
  l->set_num_kv_heads(2);
  l->set_head_dim(32);
  l->set_block_size(16);
  l->set_dtype(v1::DTYPE_BF16);
  l->set_num_blocks(1000);
  r.set_epoch(9);
  r.set_max_num_batched_tokens(256);
  r.set_max_num_seqs(64);
  r.set_max_context_tokens(4096);
  r.set_vocab_size(1000);
  r.set_architecture("LlamaForCausalLM");
  return r;
}

TEST(ReportBridgeTest, RegistrationsRoundTripAndMalformedOnesNameTheirField) {
  auto info = RegistrationFromProto(Registration());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->is_decode());
  EXPECT_EQ(info->kv_layout.dtype, DType::kBF16);
  EXPECT_EQ(info->kv_bytes_per_token(), int64_t{4} * 2 * 2 * 32 * 2);
  v1::WorkerRegistration back;
  RegistrationToProto(*info, &back);
  EXPECT_EQ(back.SerializeAsString(), Registration().SerializeAsString());

  struct Case {
    std::string field;
    std::function<void(v1::WorkerRegistration*)> edit;
  };
  const std::vector<Case> cases = {
      {"registration.role",
       [](v1::WorkerRegistration* r) { r->set_role(v1::WORKER_ROLE_UNSPECIFIED); }},
      {"registration.kv_layout.dtype",
       [](v1::WorkerRegistration* r) { r->mutable_kv_layout()->clear_dtype(); }},
      {"registration.kv_layout.dtype",
       [](v1::WorkerRegistration* r) {
         r->mutable_kv_layout()->set_dtype(static_cast<v1::DType>(77));
       }},
      {"registration.max_num_batched_tokens",
       [](v1::WorkerRegistration* r) { r->set_max_num_batched_tokens(0); }},
      {"registration.worker_id", [](v1::WorkerRegistration* r) { r->clear_worker_id(); }},
  };
  for (const Case& c : cases) {
    v1::WorkerRegistration r = Registration();
    c.edit(&r);
    auto s = RegistrationFromProto(r);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_TRUE(absl::StrContains(s.status().message(), c.field)) << s.status();
  }
  v1::WorkerRegistration huge = Registration();
  // A value beyond int saturates instead of wrapping into something plausible.
  huge.mutable_kv_layout()->set_block_size(UINT32_MAX);
  EXPECT_FALSE(RegistrationFromProto(huge).ok());
}

TEST(ReportBridgeTest, APrefillsMeasurementsCrossThePrefillAnswerUnchanged) {
  const PrefillMeasurement measured{.queue_ms = 1.5,
                                    .compute_ms = 42.25,
                                    .transfer_ms = 40,
                                    .transfer_tail_ms = 0.75,
                                    .transfer_bytes = uint64_t{3} << 33,
                                    .computed_tokens = 4096,
                                    .batch_tokens = 5120,
                                    .batch_token_squares = 4096.0 * 4096 + 1024.0 * 1024};
  v1::PrefillResponse response;
  MeasurementToProto(measured, &response);
  const PrefillMeasurement back = MeasurementFromProto(response);
  EXPECT_EQ(back.queue_ms, 1.5);
  EXPECT_EQ(back.compute_ms, 42.25);
  EXPECT_EQ(back.transfer_ms, 40);
  EXPECT_EQ(back.transfer_tail_ms, 0.75);
  EXPECT_EQ(back.transfer_bytes, uint64_t{3} << 33);
  EXPECT_EQ(back.computed_tokens, 4096);
  EXPECT_EQ(back.batch_tokens, 5120);
  EXPECT_EQ(back.batch_token_squares, 4096.0 * 4096 + 1024.0 * 1024);
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
  report.load.pending_prefill_token_squares = 500.0 * 500 + 400.0 * 400;
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
  EXPECT_EQ(back.load.pending_prefill_token_squares, 500.0 * 500 + 400.0 * 400);
  EXPECT_TRUE(back.load.draining);
  // A queue's squares that no queue can have are taken as not reported.
  for (double forged : {-1.0, std::nan(""), HUGE_VAL}) {
    out.set_pending_prefill_token_squares(forged);
    EXPECT_EQ(ReportFromProto(out).load.pending_prefill_token_squares, 0) << forged;
  }
  ASSERT_EQ(back.steps.size(), 1u);
  EXPECT_EQ(back.steps[0].duration_ms, 12);
}

}  // namespace
}  // namespace pdserve::wire
