// pdserve-sim validate on a serve bench output directory written here: the requests of each
// rate point are regenerated from its seed (so a "measurement" equal to the simulation of the
// same requests validates with zero error, and one 20 % off with 20 %), the knee is where
// measured attainment first misses the target, and bad input names what is wrong.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "sim/validate.h"
#include "tests/testing/test_models.h"

namespace pdserve::sim {
namespace {

class ValidateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("validate-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "runs/mixed/cost_model");
    nlohmann::json summary = {
        {"model", pdserve::testing::TestModelDir("tiny")},
        {"mixed",
         {{"slo_ttft_ms", {{"chat", 200.0}, {"document", 2000.0}, {"follow_up", 200.0}}},
          {"slo_tpot_ms", {{"chat", 20.0}, {"document", 20.0}, {"follow_up", 20.0}}}}}};
    Write("summary.json", summary);
    // Timing of a small CPU worker: every step 2 ms + 0.05 ms per prefill token.
    config_.serve_dir = dir_.string();
    config_.rpc_ms = 0.3;
    config_.host_ms = 0;
    config_.profile.timing.step_intercept_ms = 2;
    config_.profile.timing.step_per_decode_ms = 0.05;
    config_.profile.timing.step_per_prefill_token_ms = 0.05;
    config_.profile.timing.step_per_attention_ms = 0;
    config_.profile.timing.step_per_prefill_attention_ms = 0;
    config_.profile.timing.prefill_overhead_ms = 2;
    config_.profile.timing.prefill_per_token_ms = 0.05;
    config_.profile.timing.prefill_per_token_squared_ms = 0;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::string& name, const nlohmann::json& j) {
    std::ofstream(dir_ / name) << j.dump(2);
  }
  // A rate point as the serve bench writes it, with these measured figures.
  void WritePoint(const std::string& stem, double rate, const nlohmann::json& measured) {
    nlohmann::json p = measured;
    p["rate"] = rate;
    p["requests"] = 24;
    Write("runs/mixed/cost_model/" + stem + ".json", p);
  }
  static nlohmann::json Measured(const ValidationRow& row, double scale, double attainment) {
    return {{"attainment", attainment},
            {"offloaded", 0},
            {"ttft_ms",
             {{"p50", row.ttft_p50.simulated * scale}, {"p90", row.ttft_p90.simulated * scale}}},
            {"tpot_ms",
             {{"p50", row.tpot_p50.simulated * scale}, {"p90", row.tpot_p90.simulated * scale}}}};
  }

  std::filesystem::path dir_;
  ValidateConfig config_;
};

TEST_F(ValidateTest, RegeneratesEachPointsRequestsAndMeasuresTheError) {
  // First pass: placeholders, to learn what the simulation of each point's requests gives.
  const nlohmann::json placeholder = Measured(ValidationRow{}, 1, 1.0);
  WritePoint("rate_0", 2, placeholder);
  WritePoint("rate_1", 8, placeholder);
  WritePoint("bisect_0", 5, placeholder);
  auto first = Validate(config_);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->rows.size(), 3u);
  EXPECT_EQ(first->rows[0].seed, 2026u);         // rate_0: the serve seed.
  EXPECT_EQ(first->rows[1].seed, 2026u + 1000);  // bisect_0 (rate 5) sorts between.
  EXPECT_EQ(first->rows[2].seed, 2026u + 1);
  for (const ValidationRow& r : first->rows) EXPECT_GT(r.ttft_p50.simulated, 0) << r.rate;

  // Measured exactly as simulated at 2/s and 5/s; at 8/s 20 % slower and below the target.
  WritePoint("rate_0", 2, Measured(first->rows[0], 1.0, first->rows[0].attainment.simulated));
  WritePoint("bisect_0", 5, Measured(first->rows[1], 1.0, first->rows[1].attainment.simulated));
  WritePoint("rate_1", 8, Measured(first->rows[2], 1.2, 0.5));
  auto exact = Validate(config_);
  ASSERT_TRUE(exact.ok()) << exact.status();
  ASSERT_GE(first->rows[0].attainment.simulated, 0.9);
  ASSERT_GE(first->rows[1].attainment.simulated, 0.9);
  EXPECT_EQ(exact->below_knee, 2);
  EXPECT_FALSE(exact->rows[2].below_knee);
  EXPECT_NEAR(exact->error_ttft_p50, 0, 1e-9);
  EXPECT_NEAR(exact->error_tpot_p90, 0, 1e-9);
  EXPECT_NEAR(exact->error_attainment, 0, 1e-9);
  // Goodput over the sweep: the highest passing rate, interpolated towards the failing one.
  ASSERT_EQ(exact->goodputs.size(), 1u);
  const double a5 = first->rows[1].attainment.simulated;
  EXPECT_NEAR(exact->goodputs[0].goodput.measured, 5 + (a5 - 0.9) / (a5 - 0.5) * 3, 1e-9);
  EXPECT_GE(exact->goodputs[0].goodput.simulated, 5);

  // Every point 20 % slower than simulated: a 1/1.2 - 1 error below the knee.
  WritePoint("rate_0", 2, Measured(first->rows[0], 1.2, first->rows[0].attainment.simulated));
  WritePoint("bisect_0", 5, Measured(first->rows[1], 1.2, first->rows[1].attainment.simulated));
  auto off = Validate(config_);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_NEAR(off->error_ttft_p50, 1 - 1 / 1.2, 1e-9);
  EXPECT_NEAR(off->error_tpot_p50, 1 - 1 / 1.2, 1e-9);
  const nlohmann::json j = ValidationJson(*off);
  EXPECT_NEAR(j["sim_error_ttft_p90"].get<double>(), 1 - 1 / 1.2, 1e-9);
  EXPECT_FALSE(j["sim_error_latency_met"].get<bool>());
  EXPECT_EQ(j["points"].size(), 3u);

  // A recorded seed wins over the file name's.
  nlohmann::json seeded = Measured(first->rows[0], 1.0, 1.0);
  seeded["seed"] = 99;
  WritePoint("rate_0", 2, seeded);
  auto reseeded = Validate(config_);
  ASSERT_TRUE(reseeded.ok());
  EXPECT_EQ(reseeded->rows[0].seed, 99u);
}

// The RPC hop is calibrated on the serve bench's unloaded pass: measured TTFTs 10 ms longer
// per kind give a hop longer by 10 ms over the hops a request takes; TTFTs shorter than the
// simulation's without any hop give 0.
TEST_F(ValidateTest, TheRpcHopIsCalibratedOnTheUnloadedPass) {
  WritePoint("rate_0", 2, Measured(ValidationRow{}, 1, 1.0));
  config_.rpc_ms = -1;
  config_.host_ms = -1;
  EXPECT_EQ(Validate(config_).status().code(), absl::StatusCode::kNotFound);  // No unloaded.json.
  auto unloaded = [&](double ttft_ms, double tpot_ms = 1.0) {
    Write("runs/mixed/unloaded.json",
          {{"kinds",
            {{"chat", {{"ttft_ms", ttft_ms}, {"tpot_ms", tpot_ms}}},
             {"document", {{"ttft_ms", ttft_ms + 2000}, {"tpot_ms", tpot_ms}}}}}});
  };
  unloaded(200);
  auto a = Validate(config_);
  ASSERT_TRUE(a.ok()) << a.status();
  unloaded(210);
  auto b = Validate(config_);
  ASSERT_TRUE(b.ok()) << b.status();
  const double ra = a->rpc_ms.at("mixed"), rb = b->rpc_ms.at("mixed");
  EXPECT_GT(ra, 0);
  // A request crosses 2 to 6 hops before its first token (client, router, workers).
  EXPECT_GE(rb - ra, 10.0 / 6 - 1e-9);
  EXPECT_LE(rb - ra, 10.0 / 2 + 1e-9);
  unloaded(-2000);
  auto c = Validate(config_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rpc_ms.at("mixed"), 0);
  EXPECT_EQ(ValidationJson(*b)["rpc_ms"]["mixed"].get<double>(), rb);
  // Host time per step: what the measured unloaded TPOT has over the simulated one (a step
  // per token of a lone request: 2 ms + 0.05 ms per decode here); none when it has less.
  EXPECT_EQ(b->host_ms.at("mixed"), 0);
  unloaded(210, 2.55);
  auto d = Validate(config_);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_NEAR(d->host_ms.at("mixed"), 0.5, 1e-6);
  EXPECT_NEAR(d->rows[0].tpot_p50.simulated, b->rows[0].tpot_p50.simulated + 0.5, 0.2);
  config_.host_ms = 0;  // Given: not calibrated.
  auto e = Validate(config_);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->host_ms.at("mixed"), 0);
}

// always_local's cluster is what the serve bench ran (summary.json's cluster): one decode
// worker takes the load two shared, so its simulated queueing is longer.
TEST_F(ValidateTest, AlwaysLocalRunsOnTheServeBenchsNumberOfDecodeWorkers) {
  std::filesystem::create_directories(dir_ / "runs/mixed/always_local");
  nlohmann::json point = Measured(ValidationRow{}, 1, 1.0);
  point["rate"] = 60;
  point["requests"] = 40;
  Write("runs/mixed/always_local/rate_0.json", point);
  auto simulated_ttft_p90 = [&](int workers) -> double {
    nlohmann::json summary = nlohmann::json::parse(std::ifstream(dir_ / "summary.json"));
    summary["cluster"] = {{"local_decode_workers", workers}};
    Write("summary.json", summary);
    auto r = Validate(config_);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && !r->rows.empty() ? r->rows[0].ttft_p90.simulated : -1;
  };
  const double two = simulated_ttft_p90(2), one = simulated_ttft_p90(1);
  ASSERT_GT(two, 0);
  EXPECT_GT(one, 1.2 * two);
  nlohmann::json summary = nlohmann::json::parse(std::ifstream(dir_ / "summary.json"));
  summary["cluster"] = {{"local_decode_workers", 0}};
  Write("summary.json", summary);
  EXPECT_NE(Validate(config_).status().message().find("local_decode_workers"), std::string::npos);
}

TEST_F(ValidateTest, BadInputIsAnErrorNamingIt) {
  config_.serve_dir = (dir_ / "missing").string();
  auto missing = Validate(config_);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("summary.json"), std::string::npos);
  // No rate points at all.
  config_.serve_dir = dir_.string();
  auto empty = Validate(config_);
  EXPECT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no rate points"), std::string::npos);
  // A model directory without config.json.
  config_.model_dir = dir_.string();
  auto no_model = Validate(config_);
  EXPECT_NE(no_model.status().message().find("config.json"), std::string::npos);
}

// An emulated trace replay: the profile the summary names (the serve bench's own copy) and its
// cluster shape, the recorded worker counts and trace selection are what is simulated, so the
// same requests regenerated there validate exactly; a different worker count would not.
TEST_F(ValidateTest, AnEmulatedTraceRunIsSimulatedOnItsOwnProfileTraceAndCluster) {
  const std::string profile = (dir_ / "profile.json").string();
  {
    std::ifstream in(std::string(PDSERVE_SOURCE_DIR) + "/deploy/profiles/h100-llama3-8b.json");
    std::ofstream(profile) << in.rdbuf();
  }
  std::filesystem::create_directories(dir_ / "runs/trace/cost_model");
  nlohmann::json summary = {
      {"model", pdserve::testing::TestModelDir("tiny")},
      {"profile", profile},
      {"seed", 77},
      {"cluster", {{"prefill_workers", 2}, {"decode_workers", 3}, {"local_decode_workers", 2}}},
      {"trace_selection",
       {{"path",
         std::string(PDSERVE_SOURCE_DIR) + "/bench/traces/mooncake_fast25_conversation.jsonl"},
        {"start_s", 600},
        {"duration_s", 300},
        {"length_scale", 0.1},
        {"max_context", 4096},
        {"spread_ties", true}}},
      {"trace", {{"slo_ttft_ms", {{"trace", 2000.0}}}, {"slo_tpot_ms", {{"trace", 25.0}}}}}};
  Write("summary.json", summary);
  auto point = [&](const nlohmann::json& measured) {
    nlohmann::json p = measured;
    p["rate"] = 40.0;
    p["requests"] = 60;
    Write("runs/trace/cost_model/rate_0.json", p);
  };
  point(Measured(ValidationRow{}, 1, 1.0));
  config_.profile = SimProfile();  // Anything passed is replaced by the run's own.
  auto first = Validate(config_);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->rows.size(), 1u);
  EXPECT_EQ(first->rows[0].mix, "trace");
  EXPECT_EQ(first->rows[0].seed, 77u);  // The run's seed, not the default.
  EXPECT_GT(first->rows[0].ttft_p50.simulated, 0);
  point(Measured(first->rows[0], 1.0, first->rows[0].attainment.simulated));
  auto exact = Validate(config_);
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_NEAR(exact->error_ttft_p90, 0, 1e-9);
  EXPECT_NEAR(exact->error_tpot_p50, 0, 1e-9);
  // The cluster shape matters: on one decode worker the same requests simulate otherwise.
  summary["cluster"]["decode_workers"] = 1;
  summary["cluster"]["prefill_workers"] = 1;
  Write("summary.json", summary);
  auto other = Validate(config_);
  ASSERT_TRUE(other.ok()) << other.status();
  const ValidationRow& a = exact->rows[0];
  const ValidationRow& b = other->rows[0];
  EXPECT_GT(std::abs(b.ttft_p90.simulated / a.ttft_p90.simulated - 1) +
                std::abs(b.tpot_p90.simulated / a.tpot_p90.simulated - 1),
            0.05);
  // A profile without a cluster object cannot stand for an emulated run.
  std::ofstream(profile) << R"({"step": {"intercept_ms": 5}})";
  auto bad = Validate(config_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cluster object"), std::string::npos);
}

}  // namespace
}  // namespace pdserve::sim
