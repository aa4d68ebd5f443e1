// The trace reader: both formats parse (the committed production traces included), bad rows
// are errors naming the line and the field, selection windows and scales as documented, and
// prompt tokens share exactly the prefixes the trace's block ids share.
#include "tools/measure/trace.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tools/measure/workload.h"

namespace pdserve::measure {
namespace {

const std::string kTraces = std::string(PDSERVE_SOURCE_DIR) + "/bench/traces/";

TEST(TraceParseTest, AzureRowsBecomeRelativeArrivals) {
  auto trace = ParseAzureCsv(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2023-11-16 18:15:46.5000000,374,44\n"
      "2023-11-16 18:15:50.0000000,396,109\n"
      "2023-11-16 18:16:46.5000000,10,0\n");
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->requests.size(), 3u);
  EXPECT_EQ(trace->format, "azure");
  EXPECT_EQ(trace->block_tokens, 0);
  EXPECT_DOUBLE_EQ(trace->requests[0].arrival_s, 0);
  EXPECT_DOUBLE_EQ(trace->requests[1].arrival_s, 3.5);
  EXPECT_DOUBLE_EQ(trace->requests[2].arrival_s, 60);
  EXPECT_EQ(trace->requests[1].input_tokens, 396);
  EXPECT_EQ(trace->requests[1].output_tokens, 109);
  EXPECT_DOUBLE_EQ(trace->duration_s(), 60);
  EXPECT_DOUBLE_EQ(trace->rate(), 3.0 / 60);
}

TEST(TraceParseTest, MooncakeRowsKeepTheirBlocks) {
  auto trace = ParseMooncakeJsonl(
      "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 5, \"hash_ids\": [0, 1, 2]}\n"
      "\n"
      "{\"timestamp\": 2500, \"input_length\": 600, \"output_length\": 7, \"hash_ids\": [0, 3]}\n");
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->format, "mooncake");
  EXPECT_EQ(trace->block_tokens, 512);
  ASSERT_EQ(trace->requests.size(), 2u);
  EXPECT_DOUBLE_EQ(trace->requests[1].arrival_s, 2.5);
  EXPECT_EQ(trace->requests[0].prefix_blocks, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(trace->requests[1].output_tokens, 7);
}

TEST(TraceParseTest, BadRowsNameTheLineAndTheField) {
  struct Case {
    std::string text;
    bool mooncake;
    std::string message;
  };
  const std::string header = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  for (const Case& c : std::vector<Case>{
           {"", false, "empty"},
           {"A,B\n", false, "line 1: header lacks"},
           {header + "2023-11-16 18:15:46.5,12\n", false, "line 2: 2 fields"},
           {header + "yesterday,12,3\n", false, "line 2: TIMESTAMP 'yesterday'"},
           {header + "2023-11-16 18:15:46.5,12,3\n2023-11-16 18:15:47,-4,3\n", false,
            "line 3: ContextTokens '-4'"},
           {header + "2023-11-16 18:15:46.5,12,x\n", false, "line 2: GeneratedTokens 'x'"},
           {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\nnot json\n", true,
            "line 2: not a JSON object"},
           {"{\"input_length\": 5, \"output_length\": 1}\n", true, "line 1: 'timestamp'"},
           {"{\"timestamp\": 0, \"input_length\": \"5\", \"output_length\": 1}\n", true,
            "'input_length'"},
           {"{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 1}\n", true,
            "'input_length' must be >= 1"},
           {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": 3}\n",
            true, "'hash_ids' is not an array"},
           {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1, 2]}\n",
            true, "'hash_ids' has 2 blocks, more than 1"},
           {"\n\n", true, "no requests"},
       }) {
    auto trace = c.mooncake ? ParseMooncakeJsonl(c.text) : ParseAzureCsv(c.text);
    ASSERT_FALSE(trace.ok()) << c.text;
    EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(trace.status().message(), c.message))
        << trace.status() << " for\n"
        << c.text;
  }
  auto missing = ReadTrace("/nonexistent/trace.csv");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

// The committed production traces: their row counts (bench/traces/README.md), arrivals in
// order over about an hour, and Mooncake's shared prefixes.
TEST(TraceParseTest, TheCommittedTracesRead) {
  auto azure = ReadTrace(kTraces + "azure_llm_2023_conv.csv");
  ASSERT_TRUE(azure.ok()) << azure.status();
  EXPECT_EQ(azure->requests.size(), 19366u);
  EXPECT_GT(azure->duration_s(), 3000);
  EXPECT_LT(azure->duration_s(), 3700);
  auto mooncake = ReadTrace(kTraces + "mooncake_fast25_conversation.jsonl");
  ASSERT_TRUE(mooncake.ok()) << mooncake.status();
  EXPECT_EQ(mooncake->requests.size(), 12031u);
  for (const Trace* t : {&*azure, &*mooncake}) {
    EXPECT_TRUE(std::is_sorted(
        t->requests.begin(), t->requests.end(),
        [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; }));
  }
  // Shared prefixes: far fewer distinct block ids than blocks.
  size_t blocks = 0;
  std::set<int64_t> distinct;
  for (const TraceRequest& r : mooncake->requests) {
    blocks += r.prefix_blocks.size();
    distinct.insert(r.prefix_blocks.begin(), r.prefix_blocks.end());
  }
  EXPECT_LT(distinct.size(), blocks * 9 / 10);
}

Trace ThreeRequests() {
  Trace t;
  t.format = "mooncake";
  t.block_tokens = 512;
  t.requests = {{0, 1100, 100, {0, 1, 2}}, {10, 600, 40, {0, 3}}, {20, 2000, 300, {4, 5, 6, 7}}};
  return t;
}

TEST(TraceSelectTest, WindowRateAndLengthScales) {
  auto window = SelectFromTrace(ThreeRequests(), {.start_s = 5, .duration_s = 20});
  ASSERT_TRUE(window.ok());
  ASSERT_EQ(window->requests.size(), 2u);
  EXPECT_DOUBLE_EQ(window->requests[0].arrival_s, 5);  // Re-based to the window's start.
  EXPECT_DOUBLE_EQ(window->requests[1].arrival_s, 15);

  auto faster = SelectFromTrace(ThreeRequests(), {.rate_scale = 4, .max_requests = 2});
  ASSERT_TRUE(faster.ok());
  ASSERT_EQ(faster->requests.size(), 2u);
  EXPECT_DOUBLE_EQ(faster->requests[1].arrival_s, 2.5);

  auto shorter = SelectFromTrace(ThreeRequests(), {.length_scale = 0.25});
  ASSERT_TRUE(shorter.ok());
  EXPECT_EQ(shorter->block_tokens, 128);
  EXPECT_EQ(shorter->requests[0].input_tokens, 275);
  EXPECT_EQ(shorter->requests[0].output_tokens, 25);
  EXPECT_EQ(shorter->requests[0].prefix_blocks, (std::vector<int64_t>{0, 1, 2}));
}

// Quantized timestamps (Mooncake's clumps at the same millisecond) are spread evenly until
// the next distinct arrival; the last clump over the mean gap.
TEST(TraceSelectTest, TiesAreSpreadUntilTheNextArrival) {
  Trace t;
  t.format = "mooncake";
  t.block_tokens = 512;
  for (double a : {0.0, 0.0, 0.0, 0.0, 3.0, 3.0, 6.0, 6.0}) t.requests.push_back({a, 10, 1, {}});
  auto kept = SelectFromTrace(t, {});
  ASSERT_TRUE(kept.ok());
  EXPECT_DOUBLE_EQ(kept->requests[3].arrival_s, 0);  // Off by default.
  auto spread = SelectFromTrace(t, {.spread_ties = true});
  ASSERT_TRUE(spread.ok());
  std::vector<double> arrivals;
  for (const auto& r : spread->requests) arrivals.push_back(r.arrival_s);
  // Mean gap 6 s / 7; the last pair spreads over two of them.
  const std::vector<double> expected = {0, 0.75, 1.5, 2.25, 3, 4.5, 6, 6 + 6.0 / 7};
  ASSERT_EQ(arrivals.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(arrivals[i], expected[i], 1e-12) << i;
}

TEST(TraceSelectTest, MaxContextCutsPromptsFirstAndTheirBlocks) {
  auto capped = SelectFromTrace(ThreeRequests(), {.max_context = 700});
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->requests[0].input_tokens, 600);
  EXPECT_EQ(capped->requests[0].output_tokens, 100);
  EXPECT_EQ(capped->requests[0].prefix_blocks, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(capped->requests[1].input_tokens, 600);  // Already fits.
  EXPECT_EQ(capped->requests[2].input_tokens, 400);
  auto tiny = SelectFromTrace(ThreeRequests(), {.max_context = 50});
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->requests[2].input_tokens + tiny->requests[2].output_tokens, 50);
  EXPECT_GE(tiny->requests[2].input_tokens, 1);
}

TEST(TraceSelectTest, BadSelectionsNameTheField) {
  for (const auto& [selection, field] : std::vector<std::pair<TraceSelection, std::string>>{
           {{.start_s = -1}, "trace start"},
           {{.duration_s = -1}, "trace duration"},
           {{.rate_scale = 0}, "trace rate scale"},
           {{.length_scale = -2}, "trace length scale"},
           {{.max_context = 1}, "trace max context"},
           {{.max_requests = -1}, "trace max requests"},
       }) {
    auto out = SelectFromTrace(ThreeRequests(), selection);
    ASSERT_FALSE(out.ok()) << field;
    EXPECT_TRUE(absl::StrContains(out.status().message(), field)) << out.status();
  }
}

// Equal block ids give equal tokens, wherever they appear; different ids and the tokens past
// the blocks differ; a partial last block is a prefix of the full one.
TEST(TracePromptTest, SharedBlockIdsAreSharedTokens) {
  Trace t = ThreeRequests();
  t.requests.push_back({30, 700, 10, {0, 3}});  // Same blocks as request 1, longer.
  const auto a = PromptTokens(t, 0, 4096, 7);
  const auto b = PromptTokens(t, 1, 4096, 7);
  const auto c = PromptTokens(t, 2, 4096, 7);
  const auto d = PromptTokens(t, 3, 4096, 7);
  ASSERT_EQ(a.size(), 1100u);
  ASSERT_EQ(b.size(), 600u);
  ASSERT_EQ(d.size(), 700u);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 512, b.begin()));               // Block 0.
  EXPECT_FALSE(std::equal(a.begin() + 512, a.begin() + 600, b.begin() + 512));  // 1 vs 3.
  EXPECT_FALSE(std::equal(a.begin(), a.begin() + 512, c.begin()));              // 0 vs 4.
  EXPECT_TRUE(std::equal(b.begin(), b.end(), d.begin()));  // Partial block 3 is a prefix.
  for (const auto* v : {&a, &b, &c, &d}) {
    for (int32_t token : *v) {
      ASSERT_GE(token, 16);
      ASSERT_LT(token, 4096);
    }
  }
  // The seed changes everything; the same seed reproduces it.
  EXPECT_NE(PromptTokens(t, 0, 4096, 8), a);
  EXPECT_EQ(PromptTokens(t, 0, 4096, 7), a);
  // Without blocks, requests do not share tokens.
  Trace azure;
  azure.format = "azure";
  azure.requests = {{0, 64, 8, {}}, {1, 64, 8, {}}};
  EXPECT_NE(PromptTokens(azure, 0, 4096, 7), PromptTokens(azure, 1, 4096, 7));
  EXPECT_EQ(PromptTokens(azure, 0, 4096, 7).size(), 64u);
  EXPECT_TRUE(PromptTokens(azure, 5, 4096, 7).empty());  // Out of range.
}

// The serve bench's replay: the selection's mean rate scaled to the asked one (gaps kept in
// proportion), prompts with the trace's shared prefixes, outputs as recorded.
TEST(TraceWorkloadTest, ArrivalsScaleToTheRateAndPrefixesAreShared) {
  const Trace t = ThreeRequests();  // 3 requests over 20 s: 0.15 req/s.
  auto work = MakeTraceWorkload(t, 0.3, 10, 7, 4096);
  ASSERT_TRUE(work.ok()) << work.status();
  ASSERT_EQ(work->size(), 3u);
  EXPECT_DOUBLE_EQ((*work)[1].arrival_s, 5);
  EXPECT_DOUBLE_EQ((*work)[2].arrival_s, 10);
  EXPECT_EQ((*work)[0].prompt, PromptTokens(t, 0, 4096, 7));
  EXPECT_TRUE(std::equal((*work)[0].prompt.begin(), (*work)[0].prompt.begin() + 512,
                         (*work)[1].prompt.begin()));
  EXPECT_EQ((*work)[2].max_tokens, 300);
  EXPECT_EQ((*work)[2].kind, "trace");
  auto two = MakeTraceWorkload(t, 0.3, 2, 7, 4096);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 2u);

  Trace burst = t;
  for (auto& r : burst.requests) r.arrival_s = 0;
  EXPECT_EQ(MakeTraceWorkload(burst, 1, 3, 7, 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeTraceWorkload(t, 1, 1, 7, 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdserve::measure
