// The cost model: cost_model.json parsing (unknown keys and bad values are errors naming the
// key), online refinement converging to the true coefficients of synthetic step and prefill
// times, prefill prediction falling back to the step fit, and the transfer tail.
#include "router/cost_model.h"

#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace pdserve::router {
namespace {

TEST(CostModelParseTest, ReadsEverySectionAndRejectsTypos) {
  auto p = ParseCostModel(R"({
    "description": "test", "calibration": {"r2": 0.9},
    "step": {"intercept_ms": 1.5, "per_decode_ms": 0.2, "per_prefill_token_ms": 0.05, "per_attention_ms": 1e-6},
    "prefill": {"overhead_ms": 3, "per_token_ms": 0.04, "per_token_squared_ms": 1e-6},
    "transfer": {"latency_ms": 0.3, "bytes_per_ms": 5e6},
    "offload_overhead_ms": 1.25,
    "online": {"forgetting": 0.99, "prior_variance": 50}
  })");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->step_intercept_ms, 1.5);
  EXPECT_DOUBLE_EQ(p->step_per_prefill_token_ms, 0.05);
  EXPECT_DOUBLE_EQ(p->prefill_overhead_ms, 3);
  EXPECT_DOUBLE_EQ(p->transfer_bytes_per_ms, 5e6);
  EXPECT_DOUBLE_EQ(p->offload_overhead_ms, 1.25);
  EXPECT_DOUBLE_EQ(p->forgetting, 0.99);
  // A profile without its own chunk-attention coefficient prices chunks like decodes.
  EXPECT_DOUBLE_EQ(p->step_per_prefill_attention_ms, 1e-6);
  auto split =
      ParseCostModel(R"({"step": {"per_attention_ms": 4e-5, "per_prefill_attention_ms": 5e-7}})");
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_DOUBLE_EQ(split->step_per_attention_ms, 4e-5);
  EXPECT_DOUBLE_EQ(split->step_per_prefill_attention_ms, 5e-7);

  struct Case {
    std::string json;
    std::string names;
  };
  for (const Case& c :
       {Case{R"({"step": {"intercept": 1}})", "step.intercept"}, Case{R"({"steps": {}})", "steps"},
        Case{R"({"step": {"per_decode_ms": "fast"}})", "step.per_decode_ms"},
        Case{R"({"transfer": {"bytes_per_ms": 0}})", "transfer.bytes_per_ms"},
        Case{R"({"step": {"per_decode_ms": -1}})", "step.per_decode_ms"},
        Case{R"({"step": {"per_prefill_attention_ms": -1}})", "step.per_prefill_attention_ms"},
        Case{R"({"online": {"forgetting": 0.2}})", "online.forgetting"},
        Case{"[1, 2]", "JSON object"}, Case{"{", "JSON object"}}) {
    auto bad = ParseCostModel(c.json);
    EXPECT_FALSE(bad.ok()) << c.json;
    EXPECT_TRUE(absl::StrContains(bad.status().message(), c.names))
        << c.json << ": " << bad.status();
  }
  EXPECT_EQ(LoadCostModel("/nonexistent/cost_model.json").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CostModelParseTest, TheShippedDefaultParses) {
  std::ifstream in(std::string(PDSERVE_SOURCE_DIR) + "/deploy/cost_model.json");
  ASSERT_TRUE(in.good());
  auto p = LoadCostModel(std::string(PDSERVE_SOURCE_DIR) + "/deploy/cost_model.json");
  EXPECT_TRUE(p.ok()) << p.status();
}

// The GPU roofline profiles (deploy/profiles/, estimates until measured) load as cost models
// and order as the hardware does: H200's faster HBM makes batch-1 steps shorter than H100's,
// and 70B over 4 GPUs is slower per step than 8B on one.
TEST(CostModelParseTest, TheGpuRooflineProfilesParseAndOrder) {
  auto step_ms = [](const std::string& name) {
    auto params = LoadCostModel(std::string(PDSERVE_SOURCE_DIR) + "/deploy/profiles/" + name);
    EXPECT_TRUE(params.ok()) << name << ": " << params.status();
    if (!params.ok()) return 0.0;
    const CostModel model(*params);
    return model.StepMs(1, {.decode = 1, .decode_attention = 1000});
  };
  const double h100_8b = step_ms("h100-llama3-8b.json");
  const double h200_8b = step_ms("h200-llama3-8b.json");
  const double h100_70b = step_ms("h100-llama3-70b.json");
  const double h200_70b = step_ms("h200-llama3-70b.json");
  EXPECT_GT(h100_8b, 4.5);  // 16 GB of weights at 3.35 TB/s.
  EXPECT_LT(h100_8b, 6);
  EXPECT_LT(h200_8b, h100_8b);
  EXPECT_LT(h200_70b, h100_70b);
  EXPECT_GT(h100_70b, h100_8b);
  // On a GPU a chunk's attention is compute-bound, a decode's memory-bound: per position a
  // chunk is far cheaper.
  auto params =
      LoadCostModel(std::string(PDSERVE_SOURCE_DIR) + "/deploy/profiles/h100-llama3-8b.json");
  ASSERT_TRUE(params.ok());
  EXPECT_LT(params->step_per_prefill_attention_ms * 20, params->step_per_attention_ms);
}

TEST(CostModelTest, StepFitConvergesToTheTrueCoefficients) {
  CostModelParams prior;  // Deliberately far from the truth below.
  CostModel model(prior);
  const uint64_t fp = 42;
  // Chunk attention 20x cheaper per position than decode attention, as on a GPU.
  auto truth = [](const StepWork& w) {
    return 3.0 + 0.8 * w.decode + 0.02 * w.prefill_tokens + 4e-5 * w.decode_attention +
           2e-6 * w.prefill_attention;
  };
  std::mt19937 rng(7);
  double first_error = 0;
  for (int i = 0; i < 400; ++i) {
    const double d = rng() % 32;
    const double p = rng() % 3 == 0 ? rng() % 512 : 0;
    StepWork w = StepWork::Chunk(p, rng() % 4096);
    w.decode = d;
    w.decode_attention = d * (rng() % 2048);
    const double noise = 1.0 + 0.02 * ((rng() % 1000) / 500.0 - 1.0);
    const double predicted = model.ObserveStep(fp, w, truth(w) * noise);
    if (i == 0) first_error = std::abs(predicted - truth(w));
  }
  for (const StepWork& w : {StepWork{.decode = 8, .decode_attention = 8000},
                            StepWork{.decode = 4,
                            .prefill_tokens = 256,
                            .decode_attention = 4000,
                            .prefill_attention = 300000},
                            StepWork::Chunk(512, 2048)}) {
    const double want = truth(w);
    EXPECT_NEAR(model.StepMs(fp, w), want, 0.05 * want)
        << w.decode << " " << w.prefill_tokens << " " << w.prefill_attention;
  }
  EXPECT_GT(first_error, 1.0);  // The prior really was wrong.
  // Another model keeps the prior.
  EXPECT_DOUBLE_EQ(model.StepMs(7, {.decode = 1}),
                   prior.step_intercept_ms + prior.step_per_decode_ms);
  const auto coefficients = model.Coefficients();
  EXPECT_NEAR(coefficients.at("step.per_decode_ms@000000000000002a"), 0.8, 0.08);
  EXPECT_NEAR(coefficients.at("step.per_attention_ms@000000000000002a"), 4e-5, 8e-6);
  EXPECT_NEAR(coefficients.at("step.per_prefill_attention_ms@000000000000002a"), 2e-6, 4e-7);
}

TEST(CostModelTest, PrefillUsesItsOwnFitThenTheStepFitThenThePrior) {
  CostModelParams prior;
  CostModel model(prior);
  const uint64_t fp = 1;
  const double prior_2048 = prior.prefill_overhead_ms + prior.prefill_per_token_ms * 2048 +
                            prior.prefill_per_token_squared_ms * 2048 * 2048;
  EXPECT_NEAR(model.PrefillMs(fp, 2048), prior_2048, 1e-6);
  // Decode workers report steps: prefill is predicted as one big step of the same model.
  for (int i = 0; i < 50; ++i) {
    const double p = 64 * (i % 8 + 1);
    model.ObserveStep(fp, StepWork::Chunk(p, 0), 1.0 + 0.01 * p + 2e-6 * p * (p + 1) / 2);
  }
  // Extrapolated from steps of at most 512 tokens: close, not exact (the prior predicts 1 s).
  const double from_steps = model.PrefillMs(fp, 2048);
  const double expected = prior.prefill_overhead_ms + 0.01 * 2048 + 2e-6 * 2048 * 2049 / 2;
  EXPECT_NEAR(from_steps, expected, 0.2 * expected);
  // Timed offloaded prefills take over.
  auto truth = [](double l) { return 5.0 + 0.03 * l + 1e-5 * l * l; };
  for (double l : {256.0, 512.0, 1024.0, 2048.0, 4096.0, 300.0, 3000.0, 1500.0})
    model.ObservePrefill(fp, PrefillBatchWork::Prompt(l), truth(l));
  for (int i = 0; i < 20; ++i) {
    const double l = 500.0 + 200 * i;
    model.ObservePrefill(fp, PrefillBatchWork::Prompt(l), truth(l));
  }
  EXPECT_NEAR(model.PrefillMs(fp, 2048), truth(2048), 0.03 * truth(2048));
}

// A prefill worker's busy share from the arrivals of each length class: exactly the sum of
// each class's rate times its mean prompt's PrefillMs, in the prior, from steps and from
// timed prefills alike (the policy's M/G/1 term reads it; it must not move a decision).
TEST(CostModelTest, ThePrefillBusyShareIsTheSumOfItsClassesPrefills) {
  CostModel model{CostModelParams()};
  const uint64_t fp = 7;
  const std::vector<LengthClassRate> classes = {
      {.min_tokens = 90, .mean_tokens = 100, .per_s = 3},
      {.min_tokens = 1024, .mean_tokens = 1200.5, .per_s = 0.25},
      {.min_tokens = 8192, .mean_tokens = 9000, .per_s = 0.01}};
  auto summed = [&] {
    double share = 0;
    for (const LengthClassRate& c : classes)
      share += c.per_s * model.PrefillMs(fp, c.mean_tokens) / 1e3;
    return share;
  };
  EXPECT_GT(summed(), 0);
  EXPECT_EQ(model.PrefillBusyShare(fp, classes), summed());  // The prior.
  for (int i = 0; i < 50; ++i) {
    const double p = 64 * (i % 8 + 1);
    model.ObserveStep(fp, StepWork::Chunk(p, 0), 1.0 + 0.01 * p + 2e-6 * p * (p + 1) / 2);
  }
  EXPECT_EQ(model.PrefillBusyShare(fp, classes), summed());  // From steps.
  for (double l : {256.0, 512.0, 1024.0, 2048.0, 4096.0, 300.0, 3000.0, 1500.0})
    model.ObservePrefill(fp, PrefillBatchWork::Prompt(l), 5.0 + 0.03 * l);
  EXPECT_EQ(model.PrefillBusyShare(fp, classes), summed());  // From timed prefills.
  EXPECT_EQ(model.PrefillBusyShare(fp, {}), 0);
}

// A prefill worker times a batch, and every prompt of it reports that time. Learned from the
// batch (its tokens and the sum of their squares, each prompt weighing its share) the fit is
// the one prompt's cost, and it prices a queue of prompts as their batch; learned as if each
// prompt had taken the whole time alone, it overrates them.
TEST(CostModelTest, PrefillIsLearnedFromTheBatchItsTimeCovers) {
  CostModelParams prior;
  prior.prefill_overhead_ms = 1;
  prior.prefill_per_token_ms = 0.2;
  prior.prefill_per_token_squared_ms = 0;
  const uint64_t fp = 0xb;
  auto truth = [](double tokens, double squares) { return 5.0 + 0.03 * tokens + 1e-5 * squares; };
  CostModel batched(prior), per_prompt(prior);
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> length(100, 4000), size(1, 4);
  for (int b = 0; b < 60; ++b) {
    std::vector<double> prompts(static_cast<size_t>(size(rng)));
    PrefillBatchWork batch;
    for (double& l : prompts) {
      l = length(rng);
      batch.tokens += l;
      batch.token_squares += l * l;
    }
    const double ms = truth(batch.tokens, batch.token_squares);
    for (double l : prompts) {
      batched.ObservePrefill(fp, batch, ms, l / batch.tokens);
      per_prompt.ObservePrefill(fp, PrefillBatchWork::Prompt(l), ms);
    }
  }
  for (double l : {300.0, 2048.0, 8000.0})
    EXPECT_NEAR(batched.PrefillMs(fp, l), truth(l, l * l), 0.03 * truth(l, l * l)) << l;
  // A queue of one 6000-token prompt and three of 1000 is priced as their batch.
  const PrefillBatchWork queue{9000, 6000.0 * 6000 + 3 * 1000.0 * 1000};
  EXPECT_NEAR(batched.PrefillMs(fp, queue), truth(queue.tokens, queue.token_squares),
              0.03 * truth(queue.tokens, queue.token_squares));
  EXPECT_GT(batched.PrefillMs(fp, queue), batched.PrefillMs(fp, PrefillBatchWork{9000, 9 * 1e6}));
  // The per-prompt rule, on the same reports, is far off.
  EXPECT_GT(per_prompt.PrefillMs(fp, 2048), 1.5 * truth(2048, 2048.0 * 2048));
}

TEST(CostModelTest, TransferTailTracksObservedLatency) {
  CostModelParams prior;
  prior.transfer_latency_ms = 5;
  prior.transfer_bytes_per_ms = 1e6;
  CostModel model(prior);
  EXPECT_DOUBLE_EQ(model.TransferTailMs(2e6), 7.0);
  for (int i = 0; i < 100; ++i) model.ObserveTransferTail(0.5 + 1.0, 1e6);  // Latency 0.5.
  EXPECT_NEAR(model.TransferTailMs(0), 0.5, 0.01);
}

}  // namespace
}  // namespace pdserve::router
