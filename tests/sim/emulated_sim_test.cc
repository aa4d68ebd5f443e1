// The emulated backend takes the simulator's time: the same profile gives a decode step (from
// the product's scheduler plan: decodes, chunks after cached prefixes), a prefill worker's
// batch and a layer-wise KV transfer the same modelled time in pdserve-sim and on a real
// worker with --backend=emulated. A formula changed on one side only fails here.
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "decode_worker/scheduler.h"
#include "decode_worker/step_report.h"
#include "engine/emulated/emulated_model.h"
#include "gtest/gtest.h"
#include "kvcache/block_manager.h"
#include "kvtransfer/loopback/loopback_transport.h"
#include "kvtransfer/paced/paced_transport.h"
#include "sim/sim_prefill_worker.h"
#include "sim/sim_profile.h"
#include "tests/testing/jumping_clock.h"
#include "tests/testing/test_models.h"

namespace pdserve::sim {
namespace {

using pdserve::testing::JumpingClock;

SimProfile Profile() {
  auto p = LoadSimProfile(std::string(PDSERVE_SOURCE_DIR) + "/deploy/profiles/h100-llama3-8b.json");
  EXPECT_TRUE(p.ok()) << p.status();
  return *p;
}

// The model directory's part of an emulated model: a test model's config.json.
ModelConfig Base() {
  std::ifstream in(pdserve::testing::TestModelDir("micro") + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  auto config = ModelConfig::FromJson(text.str());
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

std::unique_ptr<engine::EmulatedModel> Emulated(const SimProfile& profile,
                                                const std::string& timing) {
  engine::EmulatedModelOptions o;
  o.profile = profile;
  o.timing = timing;
  auto m = engine::EmulatedModel::Create(Base(), o);
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

TEST(EmulatedSimTest, EveryPlannedDecodeStepTakesTheSimulatorsTime) {
  const SimProfile profile = Profile();
  auto model = Emulated(profile, "decode");
  kvcache::BlockManager blocks(2048);
  decode::SchedulerConfig config;
  config.block_size = 16;
  config.max_num_batched_tokens = 256;  // Chunks long prompts across steps beside decodes.
  config.max_num_seqs = 16;
  decode::Scheduler scheduler(config, &blocks);
  uint64_t order = 0;
  for (int length : {700, 40, 300, 1200, 90}) {
    auto seq = std::make_unique<decode::Sequence>();
    seq->order = order++;
    for (int i = 0; i < length; ++i) seq->tokens.push_back(3 + (i * 31 + length) % 4000);
    seq->prompt_len = length;
    seq->sampling.max_tokens = 20;
    scheduler.Add(std::move(seq));
  }
  engine::PackedBatch batch;
  int steps = 0, mixed = 0, decode_only = 0;
  for (; steps < 200; ++steps) {
    const decode::StepPlan plan = scheduler.PlanStep();
    if (plan.empty()) break;
    // What pdserve-sim waits for this step (Simulation::StepMs without jitter).
    const double simulated = profile.timing.StepMs(StepWork::Of(decode::ObserveStep(plan)));
    decode::PackStep(plan, &batch);
    EXPECT_NEAR(model->ModelledMs(batch), simulated, 1e-9) << "step " << steps;
    mixed += plan.num_prefill_tokens > 0 && plan.num_decode > 0;
    decode_only += plan.num_prefill_tokens == 0;
    std::vector<int32_t> sampled;
    for (const decode::PlannedChunk& c : plan.chunks) {
      if (c.want_logits) sampled.push_back(7);
    }
    scheduler.ApplyStep(plan, sampled);
    for (const decode::PlannedChunk& c : plan.chunks) {
      if (c.want_logits && c.seq->generated() >= c.seq->sampling.max_tokens)
        scheduler.Finish(c.seq);
    }
  }
  EXPECT_GT(mixed, 3) << "the plans mixed chunks with decodes";
  EXPECT_GT(decode_only, 10);
}

TEST(EmulatedSimTest, APrefillBatchAndItsLayerwiseTransferTakeTheSimulatorsTime) {
  const SimProfile profile = Profile();
  // Prompts of whole blocks: the simulator counts tokens, the transport whole blocks.
  const std::vector<int> prompts = {1024, 304, 2048};
  SimPrefillWorker sim(profile.shape, profile.timing,
                       LinkModel{.bytes_per_ms = profile.timing.transfer_bytes_per_ms,
                                 .latency_ms = profile.timing.transfer_latency_ms});
  int request = 0;
  double squares = 0;
  for (int p : prompts) {
    sim.Submit({.request = request++, .prompt_tokens = p, .transfer_tokens = p});
    squares += 1.0 * p * p;
  }
  // The queue's shape, as the real batcher reports it.
  EXPECT_EQ(sim.Load().pending_prefill_token_squares, squares);
  const double sim_end_ms = sim.StartBatch(0);
  EXPECT_EQ(sim.Load().pending_prefill_token_squares, squares);  // Computing.
  const std::vector<SimPrefillDone> done = sim.FinishBatch();
  ASSERT_EQ(done.size(), prompts.size()) << "one batch";
  EXPECT_EQ(sim.Load().pending_prefill_token_squares, 0);
  for (const SimPrefillDone& d : done) {  // Each reports the batch its compute time covers.
    EXPECT_EQ(d.batch_tokens, 1024 + 304 + 2048);
    EXPECT_EQ(d.batch_token_squares, squares);
  }

  // The emulated prefill worker: the same prompts in one forward, each layer shipped through
  // the paced transport as the layer hook announces it.
  JumpingClock clock;
  engine::EmulatedModelOptions o;
  o.profile = profile;
  o.timing = "prefill";
  o.clock = &clock;
  auto model = *engine::EmulatedModel::Create(Base(), o);
  const KvLayout layout = model->MakeKvLayout(512, 16, DType::kF32);
  auto fabric = std::make_shared<kvtransfer::LoopbackFabric>();
  kvtransfer::LoopbackTransport receiver(fabric, "decode-0");
  const double real_per_token = static_cast<double>(layout.token_bytes()) * 2 * layout.num_layers;
  kvtransfer::PacedTransport sender(
      std::make_unique<kvtransfer::LoopbackTransport>(fabric, "prefill-0"),
      kvtransfer::LinkEmulation{
          .bytes_per_ms = profile.timing.transfer_bytes_per_ms,
          .latency_ms = profile.timing.transfer_latency_ms,
          .byte_scale = static_cast<double>(profile.shape.kv_bytes_per_token()) / real_per_token},
      &clock);
  auto dst_pool = *receiver.CreatePool(layout);
  auto src_pool = *sender.CreatePool(layout);
  auto pool = *kvcache::KvPool::Wrap(layout, src_pool->base(), src_pool->bytes());
  const kvtransfer::KvPoolDescriptor d =
      *receiver.ServePool(dst_pool.get(), "decode-0", model->fingerprint(), 1);
  engine::PackedBatch batch;
  std::vector<std::vector<int32_t>> tables;
  std::vector<std::unique_ptr<kvtransfer::OutboundTransfer>> transfers;
  std::vector<std::shared_ptr<kvtransfer::InboundTransfer>> inbound;
  int next_block = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> table(prompts[i] / 16);
    for (int32_t& b : table) b = next_block++;
    tables.push_back(table);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> tokens(prompts[i], 5 + static_cast<int32_t>(i));
    batch.Add(tokens, 0, tables[i], true);
    inbound.push_back(*receiver.Expect(
        {.token = i + 1, .block_ids = tables[i], .num_layers = layout.num_layers}));
    transfers.push_back(*sender.Open({d, i + 1, tables[i]}, src_pool.get(), model->fingerprint()));
  }
  engine::ForwardOptions options;
  options.layer_hook = [&](int layer) {
    for (size_t i = 0; i < transfers.size(); ++i)
      EXPECT_TRUE(transfers[i]->WriteLayer(layer, tables[i]).ok());
    return true;
  };
  engine::Logits logits;
  const absl::Time start = clock.Now();
  ASSERT_TRUE(model->Forward(batch, *pool, options, &logits).ok());
  EXPECT_NEAR(absl::ToDoubleMilliseconds(clock.Now() - start), done[0].compute_ms, 1e-3);
  for (auto& t : transfers) ASSERT_TRUE(t->Finish(absl::Seconds(60)).ok());
  EXPECT_NEAR(absl::ToDoubleMilliseconds(clock.Now() - start), sim_end_ms, 1e-3);
  for (auto& in : inbound) EXPECT_TRUE(in->Wait(absl::Seconds(5)).ok());
}

}  // namespace
}  // namespace pdserve::sim
