// A streamed completion through the router's OpenAI-compatible HTTP API, timed at the client
// as benchmark harnesses time it (vllm bench serve, genai-perf): the request is sent, and each
// server-sent event that carries text is stamped when it arrives. For `pdserve-bench` to
// compare the HTTP front with the gRPC API on the same cluster.
// Thread-safety: stateless; each call uses a connection of its own.
#ifndef PDSERVE_TOOLS_CLIENT_OPENAI_STREAM_H_
#define PDSERVE_TOOLS_CLIENT_OPENAI_STREAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace pdserve::client {

struct OpenAiStreamOutcome {
  int http_status = 0;
  // What went wrong (the error body, or the transport's failure); empty on success.
  std::string error;
  absl::Time start;                     // Just before the request was sent.
  std::vector<absl::Time> event_times;  // Arrival of each event that carried text.
  std::string text;
  int prompt_tokens = 0;  // From the usage chunk.
  int completion_tokens = 0;
  std::string placement_mode;  // "local" or "offload" (the "pdserve" field).
  bool fell_back_to_local = false;

  bool ok() const { return http_status == 200 && error.empty(); }
};

// A request's own service-level objectives (0: the router's), sent in the "pdserve" field.
struct RequestObjectives {
  double ttft_ms = 0;
  double tpot_ms = 0;
};

// POST /v1/completions on `address` (host:port) with a token-id prompt, streamed with
// stream_options.include_usage; greedy unless `temperature` > 0. Bounded by `timeout`.
OpenAiStreamOutcome StreamCompletion(const std::string& address, const std::vector<int32_t>& prompt,
                                     int max_tokens, bool ignore_eos, absl::Duration timeout,
                                     float temperature = 0.0f,
                                     const RequestObjectives& objectives = {});

}  // namespace pdserve::client

#endif  // PDSERVE_TOOLS_CLIENT_OPENAI_STREAM_H_
