// Every process's /metrics passes `promtool check metrics` (Prometheus's own lint: base
// units, counter suffixes, help text) after traffic that exercises local and offloaded
// prefills, so that labelled families have series. The router's interference counters once
// failed it (`*_ms_total`: abbreviated units).
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/router/cluster_fixture.h"
#include "tests/testing/http_client.h"
#include "tools/client/generation_client.h"

namespace pdserve {
namespace {

using testing::ClusterOptions;
using testing::LocalCluster;

// promtool's verdict on an exposition: empty when clean, else its complaints.
std::string PromtoolComplaints(const std::string& exposition) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string input = (dir / absl::StrCat("pdserve-metrics-", getpid(), ".txt")).string();
  const std::string output = input + ".out";
  std::ofstream(input) << exposition;
  const int rc =
      std::system(absl::StrCat("promtool check metrics < ", input, " > ", output, " 2>&1").c_str());
  std::ifstream in(output);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(input);
  std::filesystem::remove(output);
  return rc == 0 ? "" : absl::StrCat("exit ", rc, ": ", text);
}

TEST(MetricsLintTest, EveryProcessPassesPromtoolCheckMetrics) {
  ASSERT_EQ(std::system("promtool --version > /dev/null 2>&1"), 0)
      << "promtool missing (Debian package prometheus; scripts/install_deps.sh installs it)";
  auto cluster = LocalCluster::Start(
      ClusterOptions{.prefill_workers = 1,
                     .decode_workers = 1,
                     .router_flags = {"--policy=length_threshold", "--length_threshold=24"}});
  ASSERT_NE(cluster, nullptr);
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt.push_back(3 + i % 50);
  for (const std::vector<int32_t>& prompt : {std::vector<int32_t>{5, 6, 7}, long_prompt}) {
    const auto out =
        client::CallGenerate(cluster->channel(), client::MakeRequest(prompt, 4), absl::Seconds(60));
    ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  }
  ASSERT_TRUE(cluster->WaitForStatus(
      [](const v1::ClusterStatus& s) { return s.recent_decisions_size() >= 2; }));
  std::vector<std::pair<std::string, ChildProcess*>> processes = {{"router", &cluster->router()}};
  processes.emplace_back("decode", cluster->decode()[0].get());
  processes.emplace_back("prefill", cluster->prefill()[0].get());
  for (const auto& [role, process] : processes) {
    auto page = testing::HttpGet(process->metrics_address(), "/metrics");
    ASSERT_TRUE(page.ok()) << role << ": " << page.status();
    ASSERT_EQ(page->status, 200) << role;
    EXPECT_EQ(PromtoolComplaints(page->body), "") << role << "'s /metrics";
  }
}

}  // namespace
}  // namespace pdserve
