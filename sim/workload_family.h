// A family of synthetic workloads that spans the shapes production traffic takes, so that a
// placement policy is judged on more than the traces it was developed on: every combination
// of a prompt-length distribution (short chat turns, long documents or code context, a mix
// of both, a heavy tail up to 32k), an output-length distribution (completions of 1-16
// tokens, ~100-token answers, ~1,000-token generations), prefix sharing (none, multi-turn
// conversations that resend their history, a shared system prompt) and arrivals (Poisson,
// or bursts). Each cell is a deterministic window of requests at a nominal rate of one per
// second; the planner scales the rate (planner.h).
// Thread-safety: pure functions.
#ifndef PDSERVE_SIM_WORKLOAD_FAMILY_H_
#define PDSERVE_SIM_WORKLOAD_FAMILY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/simulator.h"

namespace pdserve::sim {

enum class PromptShape { kShort, kLong, kBimodal, kHeavyTail };
enum class OutputShape { kTiny, kMedium, kLong };
enum class Sharing { kNone, kMultiTurn, kSystemPrompt };
enum class Arrivals { kPoisson, kBursty };

struct WorkloadCell {
  PromptShape prompt = PromptShape::kShort;
  OutputShape output = OutputShape::kMedium;
  Sharing sharing = Sharing::kNone;
  Arrivals arrivals = Arrivals::kPoisson;
  // "prompt/output/sharing/arrivals", e.g. "long/tiny/none/poisson".
  std::string Name() const;
};

// Parses Name()'s form; INVALID_ARGUMENT naming the part and its choices.
absl::StatusOr<WorkloadCell> ParseWorkloadCell(const std::string& name);

// Every combination (4 x 3 x 3 x 2 = 72 cells), prompts outermost.
std::vector<WorkloadCell> FullFamily();
// The cells CI judges: one per prompt shape, chosen where the policies differ most (long
// prompts with tiny outputs, the regime where a rule outside the cost model once left
// cost_model at 0.31x the best fixed policy), plus sharing and bursts.
std::vector<WorkloadCell> SmokeFamily();

// `count` requests of `cell` at one request per second on average, deterministic in `seed`,
// with tokens in [0, vocab) and prompt plus output within `max_context`. Kinds name the cell.
// Multi-turn: conversations of 2-4 turns, each follow-up sending only its new question after
// the turn before ends (SimRequest::follow_up_of). System prompt: every prompt starts with one
// of four 1,024-token system prompts.
std::vector<SimRequest> FamilyRequests(const WorkloadCell& cell, int count, uint64_t seed,
                                       int vocab, int max_context);

}  // namespace pdserve::sim

#endif  // PDSERVE_SIM_WORKLOAD_FAMILY_H_
