#include "tools/client/openai_stream.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tools/client/http_connection.h"

namespace pdserve::client {
namespace {

// Applies one event's JSON to the outcome; true when it carried text.
bool ApplyEvent(const nlohmann::json& event, OpenAiStreamOutcome* out) {
  if (event.contains("error")) {
    out->error = event.dump();
    return false;
  }
  if (event.contains("usage") && event["usage"].is_object()) {
    out->prompt_tokens = event["usage"].value("prompt_tokens", 0);
    out->completion_tokens = event["usage"].value("completion_tokens", 0);
  }
  if (event.contains("pdserve")) {
    const auto& placement = event["pdserve"]["placement"];
    out->placement_mode = placement.value("mode", "");
    out->fell_back_to_local = placement.value("fell_back_to_local", false);
  }
  const auto& choices = event.value("choices", nlohmann::json::array());
  if (choices.empty()) return false;
  const std::string text = choices[0].value("text", "");
  out->text += text;
  return !text.empty();
}

}  // namespace

OpenAiStreamOutcome StreamCompletion(const std::string& address, const std::vector<int32_t>& prompt,
                                     int max_tokens, bool ignore_eos, absl::Duration timeout,
                                     float temperature, const RequestObjectives& objectives) {
  OpenAiStreamOutcome out;
  nlohmann::json body = {{"prompt", prompt},
                         {"max_tokens", max_tokens},
                         {"temperature", temperature},
                         {"ignore_eos", ignore_eos},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
  if (objectives.ttft_ms > 0) body["pdserve"]["ttft_ms"] = objectives.ttft_ms;
  if (objectives.tpot_ms > 0) body["pdserve"]["tpot_ms"] = objectives.tpot_ms;
  auto connection = HttpConnection::Open(address);
  if (!connection.ok()) {
    out.error = std::string(connection.status().message());
    return out;
  }
  const absl::Time deadline = absl::Now() + timeout;
  out.start = absl::Now();
  if (absl::Status s =
          (*connection)->Send(HttpRequestBytes("POST", "/v1/completions", body.dump(), "", false));
      !s.ok()) {
    out.error = std::string(s.message());
    return out;
  }
  size_t seen = 0;     // Bytes of the received data already looked at.
  size_t scanned = 0;  // Bytes of the de-chunked body whose events were applied.
  bool done = false;
  while (!done && absl::Now() < deadline) {
    // One read: returns as soon as anything new arrived.
    const std::string& raw =
        (*connection)
            ->ReadUntil([seen](const std::string& r) { return r.size() > seen; },
                        deadline - absl::Now());
    const absl::Time arrived = absl::Now();
    if (raw.size() == seen) break;  // Closed or timed out.
    seen = raw.size();
    const HttpResponseParts parts = ParseHttpResponse(raw);
    if (parts.status == 0) continue;  // Headers not complete yet.
    out.http_status = parts.status;
    if (parts.status != 200) {
      if (parts.complete) {
        out.error = parts.body;
        return out;
      }
      continue;
    }
    size_t end;
    while ((end = parts.body.find("\n\n", scanned)) != std::string::npos) {
      const std::string event = parts.body.substr(scanned, end - scanned);
      scanned = end + 2;
      if (!absl::StartsWith(event, "data: ")) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        done = true;
        break;
      }
      const nlohmann::json json = nlohmann::json::parse(payload, nullptr, false);
      if (json.is_discarded()) {
        out.error = "unparseable event: " + payload;
        return out;
      }
      if (ApplyEvent(json, &out)) out.event_times.push_back(arrived);
      if (!out.error.empty()) return out;
    }
  }
  if (!done && out.error.empty()) {
    out.error = (*connection)->peer_closed() ? "the stream ended without [DONE]" : "timed out";
  }
  return out;
}

}  // namespace pdserve::client
