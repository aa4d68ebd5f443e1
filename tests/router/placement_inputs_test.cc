#include "router/placement_inputs.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace pdserve::router {
namespace {

// A worker as the tables state it.
struct Row {
  std::string id;
  WorkerRole role = WorkerRole::kDecode;
  std::string model = "m";
  uint64_t fingerprint = 7;
  int num_blocks = 100;  // Of 16 tokens.
  int max_context = 4096;
  int running = 0;
  int waiting = 0;
  int64_t free_blocks = 100;
  bool draining = false;
  int block_size = 16;
};

class Workers {
 public:
  explicit Workers(const std::vector<Row>& rows) {
    for (const Row& row : rows) {
      auto e = std::make_unique<WorkerEntry>();
      e->info.worker_id = row.id;
      e->info.role = row.role;
      e->info.model = row.model;
      e->info.model_fingerprint = row.fingerprint;
      e->info.kv_layout = KvLayout{.num_layers = 2,
                                   .num_kv_heads = 2,
                                   .head_dim = 8,
                                   .block_size = row.block_size,
                                   .num_blocks = row.num_blocks};
      e->info.max_context_tokens = row.max_context;
      e->info.max_num_batched_tokens = 512;
      e->load.running = row.running;
      e->load.waiting = row.waiting;
      e->load.free_blocks = row.free_blocks;
      e->load.draining = row.draining;
      pointers_.push_back(e.get());
      entries_.push_back(std::move(e));
    }
  }
  const std::vector<WorkerEntry*>& all() const { return pointers_; }
  static std::vector<std::string> Ids(const std::vector<WorkerEntry*>& workers) {
    std::vector<std::string> ids;
    for (const WorkerEntry* e : workers) ids.push_back(e->info.worker_id);
    return ids;
  }

 private:
  std::vector<std::unique_ptr<WorkerEntry>> entries_;
  std::vector<WorkerEntry*> pointers_;
};

DecodeDemand Demand(int prompt, int max_tokens, std::vector<std::string> exclude = {}) {
  DecodeDemand d;
  d.model = "m";
  d.prompt_tokens = prompt;
  d.max_tokens = max_tokens;
  d.exclude = std::move(exclude);
  d.max_waiting_per_worker = 4;
  return d;
}

TEST(DecodeCandidatesTest, EachReasonForNoCandidateHasItsCode) {
  struct Case {
    std::string name;
    std::vector<Row> rows;
    DecodeDemand demand;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"no worker of the model",
       {{.id = "d0", .model = "other"}},
       Demand(10, 10),
       absl::StatusCode::kUnavailable,
       "no decode worker serves model 'm'"},
      {"a prefill worker is no decode worker",
       {{.id = "p0", .role = WorkerRole::kPrefill}},
       Demand(10, 10),
       absl::StatusCode::kUnavailable,
       "no decode worker serves"},
      {"bigger than any context",
       {{.id = "d0", .max_context = 100}},
       Demand(90, 20),
       absl::StatusCode::kInvalidArgument,
       "at most 100 tokens"},
      {"bigger than any pool",
       {{.id = "d0", .num_blocks = 2}},
       Demand(40, 1),
       absl::StatusCode::kInvalidArgument,
       "at most 31 tokens"},
      {"every capable worker excluded",
       {{.id = "d0"}, {.id = "d1", .max_context = 10}},
       Demand(20, 5, {"d0"}),
       absl::StatusCode::kUnavailable,
       "can hold 20 prompt tokens"},
      {"every capable worker draining",
       {{.id = "d0", .draining = true}},
       Demand(20, 5),
       absl::StatusCode::kUnavailable,
       "can hold"},
      {"every worker full",
       {{.id = "d0", .waiting = 4}, {.id = "d1", .waiting = 9}},
       Demand(20, 5),
       absl::StatusCode::kResourceExhausted,
       "has 4 requests waiting"},
  };
  for (const Case& c : cases) {
    Workers workers(c.rows);
    auto got = DecodeCandidates(workers.all(), c.demand);
    ASSERT_FALSE(got.ok()) << c.name;
    EXPECT_EQ(got.status().code(), c.code) << c.name << ": " << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), c.message))
        << c.name << ": " << got.status();
  }
}

TEST(DecodeCandidatesTest, KeepsTheWorkersThatCanTakeItInOrder) {
  Workers workers({{.id = "d0"},
                   {.id = "p0", .role = WorkerRole::kPrefill},
                   {.id = "d1", .waiting = 4},  // Full.
                   {.id = "d2", .draining = true},
                   {.id = "d3", .model = "other"},
                   {.id = "d4", .max_context = 20},  // Too small for 20 + 5.
                   {.id = "d5"},
                   {.id = "d6"}});
  auto got = DecodeCandidates(workers.all(), Demand(20, 5, {"d6"}));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Workers::Ids(*got), (std::vector<std::string>{"d0", "d5"}));
}

TEST(ChooseDecodeTest, TheOrderOfPreferences) {
  struct Case {
    std::string name;
    std::vector<CandidateView> views;
    bool affinity;
    size_t expected;
  };
  // CandidateView: fits, cached_tokens, work, requests, free_blocks.
  const std::vector<Case> cases = {
      {"one that fits before any that does not",
       {{false, 64, 0, 0, 1}, {true, 0, 9, 9, 50}},
       true,
       1},
      {"with affinity, the longest cached prefix before less work",
       {{true, 0, 1, 1, 50}, {true, 64, 5, 5, 50}},
       true,
       1},
      {"without affinity, less work first", {{true, 0, 1, 1, 50}, {true, 64, 5, 5, 50}}, false, 0},
      {"equal work: fewer requests", {{true, 0, 3, 4, 50}, {true, 0, 3, 2, 50}}, false, 1},
      {"equal load: the longer cached prefix",
       {{true, 16, 3, 3, 50}, {true, 32, 3, 3, 50}},
       false,
       1},
      {"then the most free blocks", {{true, 0, 3, 3, 10}, {true, 0, 3, 3, 40}}, false, 1},
      {"a full tie goes to the first", {{true, 0, 3, 3, 10}, {true, 0, 3, 3, 10}}, true, 0},
      {"one candidate", {{false, 0, 9, 9, 0}}, true, 0},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ChooseDecode(c.views, c.affinity), c.expected) << c.name;
  }
}

TEST(AffinityMayLeadTest, BothBoundsMustBePassedToOverrideAffinity) {
  auto views = [](std::vector<std::pair<double, int>> work_requests) {
    std::vector<CandidateView> v;
    for (auto [work, requests] : work_requests) v.push_back({true, 0, work, requests, 0});
    return v;
  };
  // Counts (work == requests): spread 10 > 8 and 12 > 1.5 * 2: unbalanced.
  EXPECT_FALSE(AffinityMayLead(views({{2, 2}, {12, 12}}), 8, 1.5));
  // Spread 8 is within balance_abs.
  EXPECT_TRUE(AffinityMayLead(views({{2, 2}, {10, 10}}), 8, 1.5));
  // Spread 10 > 8 but 40 <= 1.5 * 30: within balance_rel.
  EXPECT_TRUE(AffinityMayLead(views({{30, 30}, {40, 40}}), 8, 1.5));
  // Work in milliseconds: the spread counts in requests of the mean work each (2 ms here).
  EXPECT_TRUE(AffinityMayLead(views({{4, 2}, {20, 10}}), 8, 1.5));   // 16 ms = 8 requests.
  EXPECT_FALSE(AffinityMayLead(views({{2, 1}, {22, 11}}), 8, 1.5));  // 20 ms = 10 requests.
  EXPECT_TRUE(AffinityMayLead({}, 8, 1.5));
}

TEST(PrefillCandidatesForTest, OnlyWorkersThatCanWriteIntoTheDecodePool) {
  Workers workers({{.id = "d0"},
                   {.id = "p0", .role = WorkerRole::kPrefill},
                   {.id = "p1", .role = WorkerRole::kPrefill, .fingerprint = 8},
                   {.id = "p2", .role = WorkerRole::kPrefill, .draining = true},
                   {.id = "p3", .role = WorkerRole::kPrefill, .block_size = 32},
                   {.id = "p4", .role = WorkerRole::kPrefill}});
  EXPECT_EQ(Workers::Ids(PrefillCandidatesFor(workers.all(), workers.all()[0]->info)),
            (std::vector<std::string>{"p0", "p4"}));
}

TEST(BuildPlacementInputsTest, TellsThePolicyTheDecodeWorkerAndThePrefillQueues) {
  Workers workers({{.id = "d0", .running = 3},
                   {.id = "p0", .role = WorkerRole::kPrefill},
                   {.id = "p1", .role = WorkerRole::kPrefill}});
  WorkerEntry& decode = *workers.all()[0];
  decode.dispatched_since_report = 2;
  decode.load.pending_prefill_tokens = 300;
  decode.attention_per_decode = 1.5;
  decode.tpot_objectives = {40, 25, 60};
  workers.all()[1]->load.pending_prefill_tokens = 1000;
  workers.all()[2]->load.prefill_tokens_per_second = 5000;
  const std::vector<WorkerEntry*> prefill = {workers.all()[1], workers.all()[2]};
  SloConfig slo;
  slo.ttft_ms = 900;
  const PlacementInputs in = BuildPlacementInputs(decode, 200, 64, prefill, absl::Now(), slo);
  EXPECT_EQ(in.prompt_tokens, 200);
  EXPECT_EQ(in.uncached_tokens(), 136);
  EXPECT_EQ(in.decode.running, 5);  // Reported and dispatched since.
  EXPECT_EQ(in.decode.pending_prefill_tokens, 300);
  EXPECT_EQ(in.decode.step_token_budget, 512);
  EXPECT_EQ(in.decode.attention_per_decode, 1.5);
  EXPECT_EQ(in.decode.fingerprint, 7u);
  EXPECT_EQ(in.decode.kv_bytes_per_token, 2 * 8 * 4 * 2 * 2);
  EXPECT_EQ(in.decode.num_layers, 2);
  EXPECT_EQ(in.decode.streams_with_objective, 3);
  EXPECT_EQ(in.decode.tightest_tpot_ms, 25);
  ASSERT_TRUE(in.slo.has_value());
  EXPECT_EQ(in.slo->ttft_ms, 900);
  ASSERT_EQ(in.prefill.size(), 2u);
  EXPECT_EQ(in.prefill[0].index, 0);
  EXPECT_EQ(in.prefill[0].pending_tokens, 1000);
  EXPECT_EQ(in.prefill[1].index, 1);
  EXPECT_EQ(in.prefill[1].tokens_per_second, 5000);
}

}  // namespace
}  // namespace pdserve::router
