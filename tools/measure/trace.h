// Production request traces for the serving benchmark and the cluster simulator: arrival
// times, prompt and output lengths and, where the trace has them, shared prefix blocks. One
// reader for both, so a replay and a simulation see the same requests.
//
// Formats (bench/traces/README.md has their sources and licences):
//   Azure LLM inference 2023 (CSV): TIMESTAMP,ContextTokens,GeneratedTokens with wall-clock
//     timestamps "2023-11-16 18:15:46.6805900".
//   Mooncake FAST'25 (JSON lines): {"timestamp": ms since the start, "input_length",
//     "output_length", "hash_ids": [...]}: hash id i covers prompt tokens [512 i, 512 (i + 1))
//     and equal ids are equal content (a shareable prefix).
//
// A replay needs token ids: PromptTokens derives each prefix block's tokens from its id alone,
// so requests that share ids share real prefixes and the prefix cache sees what production saw.
// Thread-safety: pure functions over values.
#ifndef PDSERVE_TOOLS_MEASURE_TRACE_H_
#define PDSERVE_TOOLS_MEASURE_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pdserve::measure {

struct TraceRequest {
  double arrival_s = 0;  // Since the trace's (or the selected window's) first request.
  int input_tokens = 0;
  int output_tokens = 0;
  // Prefix block ids, one per Trace::block_tokens of the prompt (the last may be partial);
  // empty for a trace without them.
  std::vector<int64_t> prefix_blocks;
};

struct Trace {
  std::string format;                  // "azure" or "mooncake".
  int block_tokens = 0;                // Tokens per prefix block (Mooncake: 512); 0 without blocks.
  std::vector<TraceRequest> requests;  // In arrival order.

  // Last arrival minus first (0 for fewer than two requests).
  double duration_s() const;
  // Requests per second over the duration (0 when it is 0).
  double rate() const;
};

// Parses either format; errors name the line and the field.
absl::StatusOr<Trace> ParseAzureCsv(absl::string_view text);
absl::StatusOr<Trace> ParseMooncakeJsonl(absl::string_view text);
// Reads a trace file, the format told by its first line (a CSV header or a JSON object).
absl::StatusOr<Trace> ReadTrace(const std::string& path);

// What part of a trace to replay, and how to fit it to the cluster under test.
struct TraceSelection {
  double start_s = 0;     // Window start, in trace time.
  double duration_s = 0;  // Window length in trace time; 0: to the end.
  // Arrival rate multiplier: the time axis is divided by it (2: twice the load).
  double rate_scale = 1;
  // Length multiplier for prompts, outputs and prefix blocks (at least one token each), for
  // a model or a machine smaller than production's; the sharing structure is kept.
  double length_scale = 1;
  // Prompt + output tokens at most this (prompts are cut first, keeping whole blocks where
  // possible); 0: no limit.
  int max_context = 0;
  int max_requests = 0;  // 0: every request in the window.
  // Requests that share an arrival time are spread evenly until the next distinct arrival
  // (the last group over the trace's mean gap). Mooncake's timestamps are quantized to
  // ~3 s, so its requests come in clumps of ~10 at the same millisecond; replayed as is,
  // every clump is a burst no real service saw.
  bool spread_ties = false;
};

// The selected requests, arrivals re-based to the window's start and scaled.
absl::StatusOr<Trace> SelectFromTrace(const Trace& trace, const TraceSelection& selection);

// Token ids of request `index`'s prompt, in [first_token, vocab): each prefix block's tokens
// come from a generator keyed by (seed, block id), so equal ids give equal tokens; tokens
// past the blocks, and every token of a trace without blocks, are keyed by (seed, index).
std::vector<int32_t> PromptTokens(const Trace& trace, size_t index, int vocab, uint64_t seed,
                                  int first_token = 16);

}  // namespace pdserve::measure

#endif  // PDSERVE_TOOLS_MEASURE_TRACE_H_
