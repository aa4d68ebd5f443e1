// The simulator learns what the router learns: a finished offload, as a decode worker reports
// it on the wire and as pdserve-sim records it, goes through the one learning rule
// (router/learning.h) and teaches both cost models the same coefficients. A change to what the
// relay reads from a result that the simulator does not make (or the reverse) fails here.
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "pdserve/v1/generation.pb.h"
#include "router/learning.h"
#include "router/router_wire.h"
#include "sim/sim_prefill_worker.h"

namespace pdserve::sim {
namespace {

constexpr uint64_t kFingerprint = 0x5eed;
constexpr int kLayers = 32;
constexpr double kBytesPerToken = 131072;  // Llama 3 8B, bf16 KV, all layers.

// What decode_service.cc sends for a completed offload with these measurements.
v1::GenerateResult WireResult(const SimPrefillDone& done) {
  v1::GenerateResult r;
  r.mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(done.job.prompt_tokens));
  v1::Placement& p = *r.mutable_placement();
  p.set_mode(v1::PLACEMENT_MODE_OFFLOAD);
  p.set_prefill_computed_tokens(static_cast<uint32_t>(done.job.prompt_tokens));
  p.set_transfer_bytes(static_cast<uint64_t>(done.transfer_bytes));
  p.set_prefill_batch_tokens(static_cast<uint64_t>(done.batch_tokens));
  p.set_prefill_batch_token_squares(done.batch_token_squares);
  v1::StageTimings& t = *r.mutable_timings();
  t.set_prefill_queue_ms(done.queue_ms);
  t.set_prefill_ms(done.compute_ms);
  t.set_transfer_tail_ms(done.transfer_tail_ms);
  return r;
}

TEST(SimLearningTest, TheSimulatorAndTheRelayLearnTheSameFromTheSameOffloads) {
  const CostModelParams prior;
  router::CostModel relay(prior), simulated(prior);
  for (int i = 0; i < 40; ++i) {
    const int prompt = 200 + 97 * i;
    const int shipped = prompt - (i % 3) * 64;  // Some with a cached prefix on the decoder.
    SimPrefillDone done;
    done.job = SimPrefillJob{.request = i, .prompt_tokens = prompt, .transfer_tokens = shipped};
    done.queue_ms = i % 5;
    // Every other prompt was batched with one of 700 tokens, whose time it reports.
    const double other = i % 2 == 0 ? 0 : 700;
    done.batch_tokens = prompt + static_cast<int64_t>(other);
    done.batch_token_squares = 1.0 * prompt * prompt + other * other;
    done.compute_ms =
        12 + 0.09 * static_cast<double>(done.batch_tokens) + 2e-6 * done.batch_token_squares;
    done.transfer_tail_ms = 0.8 + 1e-7 * shipped * kBytesPerToken / kLayers;
    done.transfer_bytes = shipped * kBytesPerToken;
    router::PlacementResult placed;
    placed.fingerprint = kFingerprint;
    placed.num_layers = kLayers;
    placed.last_layer_bytes = 0.9 * shipped * kBytesPerToken / kLayers;  // A prediction.
    router::LearnFromOffload(router::PrefillOutcomeOf(WireResult(done), kFingerprint),
                             router::ForLearning(placed), &relay);
    router::LearnFromOffload(PrefillOutcomeOf(done, kFingerprint), router::ForLearning(placed),
                             &simulated);
  }
  const std::map<std::string, double> learned = relay.Coefficients();
  EXPECT_EQ(learned, simulated.Coefficients());
  // And they did learn (the comparison is not of two untouched priors).
  EXPECT_NE(learned, router::CostModel(prior).Coefficients());
}

// A prompt batched with others reports its batch's time: the rule learns the batch, so the
// prompt's own cost comes out right; figures that cannot describe a batch holding the prompt
// (an older worker sends none; a forged one) are the prompt alone.
TEST(SimLearningTest, ABatchedPromptTeachesItsBatchNotItsOwnLength) {
  CostModelParams prior;
  prior.prefill_overhead_ms = 0;
  prior.prefill_per_token_ms = 0.5;
  prior.prefill_per_token_squared_ms = 0;
  auto truth = [](double tokens, double squares) { return 3 + 0.02 * tokens + 1e-6 * squares; };
  router::CostModel model(prior), alone(prior), forged(prior);
  for (int i = 0; i < 120; ++i) {
    const int prompt = 300 + 31 * i;
    const double other = i % 3 == 0 ? 0 : 500 + 300 * (i % 7);  // The batch's other prompt.
    SimPrefillDone done;
    done.job = SimPrefillJob{.request = i, .prompt_tokens = prompt, .transfer_tokens = prompt};
    done.batch_tokens = prompt + static_cast<int64_t>(other);
    done.batch_token_squares = 1.0 * prompt * prompt + other * other;
    done.compute_ms = truth(static_cast<double>(done.batch_tokens), done.batch_token_squares);
    done.transfer_bytes = prompt * kBytesPerToken;
    router::LearnFromOffload(PrefillOutcomeOf(done, kFingerprint), router::PlacementForLearning{},
                             &model);
    PrefillOutcome old = PrefillOutcomeOf(done, kFingerprint);
    old.batch_tokens = 0;
    old.batch_token_squares = 0;
    router::LearnFromOffload(old, router::PlacementForLearning{}, &alone);
    PrefillOutcome lie = PrefillOutcomeOf(done, kFingerprint);
    lie.batch_token_squares = 1e30;  // More than the batch's tokens squared: not a batch.
    router::LearnFromOffload(lie, router::PlacementForLearning{}, &forged);
  }
  EXPECT_NEAR(model.PrefillMs(kFingerprint, 2000), truth(2000, 4e6), 0.05 * truth(2000, 4e6));
  // Taken alone, each prompt seemed to cost its whole batch.
  EXPECT_GT(alone.PrefillMs(kFingerprint, 2000), 1.3 * truth(2000, 4e6));
  EXPECT_EQ(forged.Coefficients(), alone.Coefficients());
}

TEST(SimLearningTest, AnOffloadWithoutAComputeTimeTeachesNothing) {
  const CostModelParams prior;
  router::CostModel model(prior);
  SimPrefillDone done;
  done.job.prompt_tokens = 1000;
  done.transfer_bytes = 1000 * kBytesPerToken;
  router::LearnFromOffload(PrefillOutcomeOf(done, kFingerprint), router::PlacementForLearning{},
                           &model);
  EXPECT_EQ(model.Coefficients(), router::CostModel(prior).Coefficients());
}

}  // namespace
}  // namespace pdserve::sim
