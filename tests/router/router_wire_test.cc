// The router's proto <-> domain edge: registrations that do not convert name their field,
// what converts survives the round trip, and a Placement becomes the v1::Placement the decode
// worker and the client read (primary prefill worker, alternates, mode).
#include "router/router_wire.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "wire/report_bridge.h"

namespace pdserve::router {
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

TEST(RouterWireTest, RegistrationsRoundTripAndMalformedOnesNameTheirField) {
  auto info = WorkerInfoFromProto(Registration());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->is_decode());
  EXPECT_EQ(info->kv_layout.dtype, DType::kBF16);
  EXPECT_EQ(info->kv_bytes_per_token(), int64_t{4} * 2 * 2 * 32 * 2);
  v1::WorkerRegistration back;
  WorkerInfoToProto(*info, &back);
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
    auto s = WorkerInfoFromProto(r);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_TRUE(absl::StrContains(s.status().message(), c.field)) << s.status();
  }
  v1::WorkerRegistration huge = Registration();
  // A value beyond int saturates instead of wrapping into something plausible.
  huge.mutable_kv_layout()->set_block_size(UINT32_MAX);
  EXPECT_FALSE(WorkerInfoFromProto(huge).ok());
}

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
