// Workloads of the serving benchmark: seeded Poisson arrivals of requests drawn from a mix.
//   chat       short prompts, long outputs
//   documents  long cold prompts, short outputs
//   mixed      half chat, three tenths documents, one fifth follow-up turns of earlier chat
//              requests (their prompt + their output + a new question: a prefix-cache hit)
// Thread-safety: pure functions.
#ifndef PDSERVE_TOOLS_MEASURE_WORKLOAD_H_
#define PDSERVE_TOOLS_MEASURE_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/measure/trace.h"

namespace pdserve::measure {

struct MixSpec {
  std::string name;
  double chat = 1;
  double documents = 0;
  double follow_up = 0;
  int chat_prompt_min = 32, chat_prompt_max = 256;
  int chat_output_min = 64, chat_output_max = 192;
  int document_prompt_min = 1024, document_prompt_max = 3000;
  int document_output_min = 8, document_output_max = 32;
  int follow_up_new_tokens = 32;
  int follow_up_output = 64;
};

// The named mix, with lengths kept within `max_context` tokens.
absl::StatusOr<MixSpec> Mix(const std::string& name, int max_context);

struct WorkloadRequest {
  double arrival_s = 0;         // Since the start of the run.
  std::vector<int32_t> prompt;  // For a follow-up: only the new question.
  int max_tokens = 0;
  int follow_up_of = -1;  // Index of the earlier request this turn continues.
  std::string kind;       // chat, document, follow_up
};

// `count` requests of `mix` at `rate` per second (exponential gaps), deterministic in `seed`.
std::vector<WorkloadRequest> MakeWorkload(const MixSpec& mix, double rate, int count, uint64_t seed,
                                          int vocab);

// The first `count` requests of `trace` (already selected and length-scaled), with the time
// axis scaled so that the whole selection's mean rate becomes `rate` per second (bursts stay
// bursts: Mooncake's first requests all arrive at 0), prompts from PromptTokens (shared prefix
// blocks are shared tokens), outputs as recorded (at least 1). Kind "trace".
// INVALID_ARGUMENT when the trace has fewer than 2 requests or they all arrive at once.
absl::StatusOr<std::vector<WorkloadRequest>> MakeTraceWorkload(const Trace& trace, double rate,
                                                               int count, uint64_t seed, int vocab);

}  // namespace pdserve::measure

#endif  // PDSERVE_TOOLS_MEASURE_WORKLOAD_H_
