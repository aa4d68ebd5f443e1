// The rules and dashboards against a real Prometheus scraping a real cluster: local,
// offloaded and prefix-hit requests, then every metric the rules name has series, every
// recording rule returns data, and so does every dashboard query. A rule over a misspelt or renamed
// metric passes promtool's checks and returns nothing here; so does one over a labelled family with
// no series before its first event (prefill failures are therefore created at 0 for every reason),
// or a ratio whose numerator has no series while all is well (the error ratio is 0 then, not
// nothing).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/net_address.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/child_process.h"
#include "tests/router/cluster_fixture.h"
#include "tests/testing/http_client.h"
#include "tests/testing/poll.h"
#include "tools/client/generation_client.h"
#include "tools/client/http_connection.h"

namespace pdserve {
namespace {

using testing::ClusterOptions;
using testing::LocalCluster;

const std::string kRules =
    std::string(PDSERVE_SOURCE_DIR) + "/deploy/prometheus/pdserve-rules.yaml";
const std::string kDashboards = std::string(PDSERVE_SOURCE_DIR) + "/deploy/grafana";
const std::string kPodMonitors =
    std::string(PDSERVE_SOURCE_DIR) + "/deploy/helm/pdserve/templates/podmonitors.yaml";

// The chart's PodMonitor relabelings as Prometheus relabel_configs, so that the labels a real
// operator adds reach this test (a `role` target label once collided with the router's own
// `role` label and made the critical alerts fire on healthy clusters).
std::string ChartRelabelConfigs() {
  std::ifstream in(kPodMonitors);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  static const std::regex kRelabel(
      R"(\{sourceLabels: \[([A-Za-z0-9_]+)\], targetLabel: ([A-Za-z0-9_]+)\})");
  std::string out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kRelabel);
       it != std::sregex_iterator(); ++it) {
    absl::StrAppend(&out, "      - {source_labels: [", (*it)[1].str(),
                    "], target_label: ", (*it)[2].str(), "}\n");
  }
  return out;
}
constexpr char kNamespace[] = "pdserve-live";

std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (isalnum(c) || c == '_' || c == '-' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += absl::StrCat("%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// The series an instant query returns (empty on any error).
nlohmann::json Query(const std::string& prometheus, const std::string& promql) {
  auto r = testing::HttpGet(prometheus, "/api/v1/query?query=" + UrlEncode(promql));
  if (!r.ok() || r->status != 200) return nlohmann::json::array();
  auto body = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || body["status"] != "success") return nlohmann::json::array();
  return body["data"]["result"];
}

// Names of recording rules, and of the metrics the rules' expressions read.
struct RuleNames {
  std::vector<std::string> records;
  std::set<std::string> metrics;
};

// The PromQL prometheus-adapter runs for External metric `name` in `namespace`, from
// deploy/prometheus/adapter-rules.yaml (its metricsQuery with <<.Series>> and
// <<.LabelMatchers>> filled in as the adapter fills them); empty when no rule serves `name`.
std::string AdapterQuery(const std::string& name, const std::string& namespace_name) {
  std::ifstream in(std::string(PDSERVE_SOURCE_DIR) + "/deploy/prometheus/adapter-rules.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  static const std::regex kRule(
      R"(seriesQuery: '([a-z_:0-9]+)\{[^']*'[\s\S]*?as: ([a-z_0-9]+)[\s\S]*?metricsQuery: '([^']+)')");
  for (std::sregex_iterator it(text.begin(), text.end(), kRule), end; it != end; ++it) {
    if ((*it)[2] != name) continue;
    return absl::StrReplaceAll((*it)[3].str(),
                               {{"<<.Series>>", (*it)[1].str()},
                                {"<<.LabelMatchers>>", "namespace=\"" + namespace_name + "\""}});
  }
  return "";
}

RuleNames ReadRuleNames() {
  std::ifstream in(kRules);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  RuleNames out;
  const std::regex record(R"(- record: ([a-z_:0-9]+))");
  for (std::sregex_iterator it(text.begin(), text.end(), record), end; it != end; ++it) {
    out.records.push_back((*it)[1]);
  }
  // Raw metric names: pdserve_..., not recording rules (which contain ':').
  const std::regex metric(R"((^|[^:a-z_])(pdserve_[a-z_]+)\b)");
  for (std::sregex_iterator it(text.begin(), text.end(), metric), end; it != end; ++it) {
    out.metrics.insert((*it)[2]);
  }
  return out;
}

// Every query of every dashboard, Grafana's variables replaced as Grafana would: "title:
// expr" pairs. The model variable selects `model`, the namespace variable kNamespace.
std::vector<std::pair<std::string, std::string>> DashboardQueries(const std::string& model) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::vector<std::pair<std::string, std::string>> substitutions = {
      {"$__rate_interval", "1m"}, {"$namespace", kNamespace}, {"$model", model}};
  for (const auto& entry : std::filesystem::directory_iterator(kDashboards)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    const nlohmann::json dashboard = nlohmann::json::parse(in);
    std::vector<nlohmann::json> panels;
    for (const auto& panel : dashboard["panels"]) {
      panels.push_back(panel);
      for (const auto& nested : panel.value("panels", nlohmann::json::array())) {
        panels.push_back(nested);
      }
    }
    for (const auto& panel : panels) {
      for (const auto& target : panel.value("targets", nlohmann::json::array())) {
        std::string expr = target.value("expr", "");
        for (const auto& [variable, value] : substitutions) {
          for (size_t pos; (pos = expr.find(variable)) != std::string::npos;) {
            expr.replace(pos, variable.size(), value);
          }
        }
        out.emplace_back(
            entry.path().filename().string() + " / " + panel.value("title", std::string()), expr);
      }
    }
  }
  return out;
}

TEST(PrometheusLiveTest, EveryRuleMetricExistsAndEveryRecordingRuleReturnsData) {
  ASSERT_EQ(std::system("prometheus --version > /dev/null 2>&1"), 0)
      << "prometheus missing (Debian package prometheus; scripts/install_deps.sh installs it)";
  auto cluster = LocalCluster::Start(
      ClusterOptions{.prefill_workers = 1,
                     .decode_workers = 1,
                     .router_flags = {"--policy=length_threshold", "--length_threshold=24",
                                      "--http_listen=127.0.0.1:0"}});
  ASSERT_NE(cluster, nullptr);

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("pdserve-prom-", getpid());
  std::filesystem::create_directories(dir);
  {
    std::ofstream config(dir / "prometheus.yml");
    config << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
           << "rule_files: ['" << kRules << "']\n"
           << "scrape_configs:\n";
    const std::string relabel = ChartRelabelConfigs();
    ASSERT_FALSE(relabel.empty()) << "no relabelings found in " << kPodMonitors;
    for (const auto& [role, process] : std::vector<std::pair<std::string, ChildProcess*>>{
             {"router", &cluster->router()},
             {"decode", cluster->decode()[0].get()},
             {"prefill", cluster->prefill()[0].get()}}) {
      // What Kubernetes service discovery gives a pod's target (its namespace, which the
      // dashboards select, and its pdserve.io/role pod label), then the chart's relabelings.
      config << "  - job_name: pdserve-" << role << "\n    static_configs: [{targets: ['"
             << process->metrics_address() << "'], labels: {namespace: '" << kNamespace
             << "', __meta_kubernetes_pod_label_pdserve_io_role: '" << role << "'}}]\n"
             << "    relabel_configs:\n"
             << relabel;
    }
  }
  const std::string prometheus = absl::StrCat("127.0.0.1:", PickFreeLoopbackPort());
  auto server = ChildProcess::Start(
      ChildOptions{.binary = "/usr/bin/prometheus",
                   .args = {"--config.file=" + (dir / "prometheus.yml").string(),
                            "--storage.tsdb.path=" + (dir / "data").string(),
                            "--web.listen-address=" + prometheus, "--log.level=warn"},
                   .expect_serving_info = false});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(testing::PollUntil(
      [&] {
        auto r = testing::HttpGet(prometheus, "/-/ready");
        return r.ok() && r->status == 200;
      },
      absl::Seconds(30), absl::Milliseconds(200)))
      << (*server)->Log();

  // Traffic only once every target has been scraped (Prometheus starts scraping a few seconds
  // after it is ready), so that rates see the counters rise.
  ASSERT_TRUE(testing::PollUntil([&] { return Query(prometheus, "up == 1").size() == 3; },
                                 absl::Seconds(30), absl::Milliseconds(200)));
  // Each round: local (short), offloaded (a long prompt new to the cluster) and a prefix hit
  // (that prompt again, extended).
  for (int round = 0; round < 3; ++round) {
    std::vector<int32_t> long_prompt;
    for (int i = 0; i < 40; ++i) long_prompt.push_back(3 + (i * 7 + round * 13) % 50);
    std::vector<int32_t> follow_up = long_prompt;
    for (int i = 0; i < 8; ++i) follow_up.push_back(60 + i);
    for (const auto& prompt : {std::vector<int32_t>{5, 6, 7}, long_prompt, follow_up}) {
      const auto out = client::CallGenerate(cluster->channel(), client::MakeRequest(prompt, 4),
                                            absl::Seconds(60));
      ASSERT_TRUE(out.status.ok()) << out.status.error_message();
    }
    // And a chat through the OpenAI-compatible HTTP API.
    auto http = client::HttpCall(
        cluster->router().serving_info().at("http"), "POST", "/v1/chat/completions",
        R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})");
    ASSERT_TRUE(http.ok() && http->status == 200)
        << (http.ok() ? http->body : http.status().ToString());
    absl::SleepFor(absl::Seconds(1));  // Spread the traffic over scrapes, so rates see it.
  }

  const RuleNames names = ReadRuleNames();
  ASSERT_GE(names.records.size(), 10u);
  ASSERT_GE(names.metrics.size(), 10u);
  std::vector<std::string> missing_metrics;
  std::vector<std::string> empty_rules;
  const bool all = testing::PollUntil(
      [&] {
        missing_metrics.clear();
        empty_rules.clear();
        for (const std::string& m : names.metrics) {
          if (Query(prometheus, m).empty()) missing_metrics.push_back(m);
        }
        for (const std::string& r : names.records) {
          if (Query(prometheus, r).empty()) empty_rules.push_back(r);
        }
        return missing_metrics.empty() && empty_rules.empty();
      },
      absl::Seconds(30), absl::Seconds(1));
  EXPECT_TRUE(all) << "metrics the rules read but no process exports: "
                   << absl::StrJoin(missing_metrics, ", ")
                   << "\nrecording rules without data: " << absl::StrJoin(empty_rules, ", ");

  // Every dashboard query returns data for this namespace and model: a panel over a renamed
  // metric, a label the processes do not export or a filter that matches nothing is empty.
  const nlohmann::json requests = Query(prometheus, "pdserve_router_requests_total");
  ASSERT_FALSE(requests.empty());
  const std::string model = requests[0]["metric"].value("model_name", "");
  const auto queries = DashboardQueries(model);
  ASSERT_GE(queries.size(), 30u);
  std::vector<std::string> empty_panels;
  const bool every_panel = testing::PollUntil(
      [&] {
        empty_panels.clear();
        for (const auto& [panel, expr] : queries) {
          if (Query(prometheus, expr).empty()) empty_panels.push_back(panel + ": " + expr);
        }
        return empty_panels.empty();
      },
      absl::Seconds(30), absl::Seconds(1));
  EXPECT_TRUE(every_panel) << "dashboard queries without data:\n"
                           << absl::StrJoin(empty_panels, "\n");
  // A healthy cluster raises no worker-availability alert (neither pending nor firing): the
  // rules see the router's own `role` label, not one the scrape configuration overwrote.
  EXPECT_TRUE(testing::PollUntil(
      [&] { return !Query(prometheus, "pdserve_router_workers{role=\"decode\"}").empty(); },
      absl::Seconds(10), absl::Seconds(1)))
      << "the router's role label did not survive the chart's scrape configuration";
  EXPECT_TRUE(Query(prometheus, "ALERTS{alertname=~\"PdserveNoReady.*\"}").empty())
      << Query(prometheus, "ALERTS{alertname=~\"PdserveNoReady.*\"}").dump();
  // The namespace filter is real: another namespace has no data.
  EXPECT_TRUE(Query(prometheus, "pdserve_router_requests_total{namespace=~\"other\"}").empty());

  // A recorded value makes sense: the offload ratio is a fraction and offloads happened.
  const nlohmann::json offload = Query(prometheus, "pdserve:offload:ratio_rate5m");
  ASSERT_FALSE(offload.empty());

  const double ratio = std::stod(offload[0]["value"][1].get<std::string>());
  EXPECT_GT(ratio, 0.0);
  EXPECT_LE(ratio, 1.0);

  // The autoscaler's External metric (deploy/prometheus/adapter-rules.yaml): the adapter's
  // query, as it runs it for the release's namespace, gives one ratio.
  const std::string miss_query = AdapterQuery("pdserve_ttft_slo_miss_ratio", kNamespace);
  ASSERT_FALSE(miss_query.empty()) << "adapter-rules.yaml serves no pdserve_ttft_slo_miss_ratio";
  const nlohmann::json miss = Query(prometheus, miss_query);
  ASSERT_EQ(miss.size(), 1u) << miss_query << ": " << miss.dump();
  const double miss_ratio = std::stod(miss[0]["value"][1].get<std::string>());
  EXPECT_GE(miss_ratio, 0.0) << miss_query;
  EXPECT_LE(miss_ratio, 1.0) << miss_query;
  (*server)->Stop(SIGTERM, absl::Seconds(10)).IgnoreError();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace
}  // namespace pdserve
