// The cost model: cost_model.json parsing (unknown keys and bad values are errors naming the
// key), online refinement converging to the true coefficients of synthetic step and prefill
// times, prefill prediction falling back to the step fit, and the transfer tail.
#include "router/cost_model.h"

#include <fstream>
#include <random>

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

  struct Case {
    std::string json;
    std::string names;
  };
  for (const Case& c :
       {Case{R"({"step": {"intercept": 1}})", "step.intercept"}, Case{R"({"steps": {}})", "steps"},
        Case{R"({"step": {"per_decode_ms": "fast"}})", "step.per_decode_ms"},
        Case{R"({"transfer": {"bytes_per_ms": 0}})", "transfer.bytes_per_ms"},
        Case{R"({"step": {"per_decode_ms": -1}})", "step.per_decode_ms"},
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
    return model.StepMs(1, /*decode=*/1, /*prefill_tokens=*/0, /*attention=*/1000);
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
}

TEST(CostModelTest, StepFitConvergesToTheTrueCoefficients) {
  CostModelParams prior;  // Deliberately far from the truth below.
  CostModel model(prior);
  const uint64_t fp = 42;
  auto truth = [](double d, double p, double a) { return 3.0 + 0.8 * d + 0.02 * p + 4e-6 * a; };
  std::mt19937 rng(7);
  double first_error = 0;
  for (int i = 0; i < 400; ++i) {
    const double d = rng() % 32;
    const double p = rng() % 3 == 0 ? rng() % 512 : 0;
    const double a = d * (rng() % 2048) + p * (p + 1) / 2;
    const double noise = 1.0 + 0.02 * ((rng() % 1000) / 500.0 - 1.0);
    const double predicted = model.ObserveStep(fp, d, p, a, truth(d, p, a) * noise);
    if (i == 0) first_error = std::abs(predicted - truth(d, p, a));
  }
  for (auto [d, p, a] : {std::tuple{8.0, 0.0, 8000.0}, std::tuple{4.0, 256.0, 40000.0},
                         std::tuple{0.0, 512.0, 131328.0}}) {
    const double want = truth(d, p, a);
    EXPECT_NEAR(model.StepMs(fp, d, p, a), want, 0.05 * want) << d << " " << p << " " << a;
  }
  EXPECT_GT(first_error, 1.0);  // The prior really was wrong.
  // Another model keeps the prior.
  EXPECT_DOUBLE_EQ(model.StepMs(7, 1, 0, 0), prior.step_intercept_ms + prior.step_per_decode_ms);
  const auto coefficients = model.Coefficients();
  EXPECT_NEAR(coefficients.at("step.per_decode_ms@000000000000002a"), 0.8, 0.08);
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
    model.ObserveStep(fp, 0, p, p * (p + 1) / 2, 1.0 + 0.01 * p + 2e-6 * p * (p + 1) / 2);
  }
  // Extrapolated from steps of at most 512 tokens: close, not exact (the prior predicts 1 s).
  const double from_steps = model.PrefillMs(fp, 2048);
  const double expected = prior.prefill_overhead_ms + 0.01 * 2048 + 2e-6 * 2048 * 2049 / 2;
  EXPECT_NEAR(from_steps, expected, 0.2 * expected);
  // Timed offloaded prefills take over.
  auto truth = [](double l) { return 5.0 + 0.03 * l + 1e-5 * l * l; };
  for (double l : {256.0, 512.0, 1024.0, 2048.0, 4096.0, 300.0, 3000.0, 1500.0})
    model.ObservePrefill(fp, l, truth(l));
  for (int i = 0; i < 20; ++i) model.ObservePrefill(fp, 500.0 + 200 * i, truth(500.0 + 200 * i));
  EXPECT_NEAR(model.PrefillMs(fp, 2048), truth(2048), 0.03 * truth(2048));
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
