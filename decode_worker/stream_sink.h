// Where a sequence's output goes: the gRPC stream of its Generate call. The scheduler loop
// pushes token updates; a gRPC reactor drains them. Bounded: tokens produced while the
// client is slow are merged into one pending message, and a sequence whose pending tokens
// exceed the limit is paused (not scheduled) until the client catches up, so a slow reader
// never grows memory without bound.
// Thread-safety: all methods are safe from any thread.
#ifndef PDSERVE_DECODE_WORKER_STREAM_SINK_H_
#define PDSERVE_DECODE_WORKER_STREAM_SINK_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/worker_reports.h"

namespace pdserve::decode {

class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // New tokens and their text, emitted at `unix_nanos`.
  virtual void PushTokens(const std::vector<int32_t>& ids, const std::string& text,
                          int64_t unix_nanos) = 0;
  // The final message (serialized GenerateResult fields live in the implementation).
  struct Final {
    int finish_reason = 0;  // text::FinishReason
    std::string stop_reason;
    std::string error_message;
    int prompt_tokens = 0;
    int cached_prompt_tokens = 0;
    int completion_tokens = 0;
    double queue_ms = 0;
    double prefill_ms = 0;  // The local prefill's, or the prefill worker's compute.
    double ttft_ms = 0, decode_ms = 0, e2e_ms = 0;
    // Offload outcome, for the placement info and the prefill worker's measurements.
    std::string prefill_worker_id;
    bool offloaded = false;
    PrefillMeasurement offload;  // Offloaded: the prefill worker's measurements.
    bool fell_back_to_local = false;
    std::string fallback_cause;
    double offload_wait_ms = 0;  // Fell back: the offload's time before it was given up.
  };
  virtual void Finish(const Final& final) = 0;
  // Ends the call without a result, for the router to place the request again elsewhere
  // (common/hand_back.h): only for a sequence that has pushed nothing. `why` is the status
  // message.
  virtual void HandBack(const std::string& why) = 0;
  // Tokens pushed but not yet written to the client.
  virtual int pending_tokens() const = 0;
  // The client went away or its deadline passed.
  virtual bool cancelled() const = 0;
};

}  // namespace pdserve::decode

#endif  // PDSERVE_DECODE_WORKER_STREAM_SINK_H_
