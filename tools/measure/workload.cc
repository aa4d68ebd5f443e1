#include "tools/measure/workload.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"

namespace pdserve::measure {

absl::StatusOr<MixSpec> Mix(const std::string& name, int max_context) {
  MixSpec m;
  m.name = name;
  if (name == "chat") {
    m.chat = 1;
  } else if (name == "documents") {
    m.chat = 0;
    m.documents = 1;
  } else if (name == "mixed") {
    m.chat = 0.5;
    m.documents = 0.3;
    m.follow_up = 0.2;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--mixes: '", name, "' is not one of chat, documents, mixed"));
  }
  // Leave room for the longest output (and, for follow-ups, a chat turn before them).
  m.document_prompt_max = std::min(m.document_prompt_max, max_context - m.document_output_max - 8);
  m.document_prompt_min = std::min(m.document_prompt_min, m.document_prompt_max);
  // A chat turn and a follow-up on it fit too.
  m.chat_prompt_max =
      std::min(m.chat_prompt_max,
               max_context - m.chat_output_max - m.follow_up_new_tokens - m.follow_up_output - 8);
  m.chat_prompt_min = std::min(m.chat_prompt_min, m.chat_prompt_max);
  return m;
}

std::vector<WorkloadRequest> MakeWorkload(const MixSpec& mix, double rate, int count, uint64_t seed,
                                          int vocab) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::uniform_real_distribution<double> unit(0, 1);
  auto uniform = [&](int lo, int hi) {
    return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  auto tokens = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    return t;
  };
  std::vector<WorkloadRequest> out;
  std::vector<int> chats;
  double t = 0;
  for (int i = 0; i < count; ++i) {
    t += gap(rng);
    WorkloadRequest r;
    r.arrival_s = t;
    const double u = unit(rng) * (mix.chat + mix.documents + mix.follow_up);
    if (u >= mix.chat + mix.documents && !chats.empty()) {
      r.kind = "follow_up";
      r.follow_up_of = chats[rng() % chats.size()];
      r.prompt = tokens(mix.follow_up_new_tokens);
      r.max_tokens = mix.follow_up_output;
    } else if (u >= mix.chat && mix.documents > 0) {
      r.kind = "document";
      r.prompt = tokens(uniform(mix.document_prompt_min, mix.document_prompt_max));
      r.max_tokens = uniform(mix.document_output_min, mix.document_output_max);
    } else {
      r.kind = "chat";
      r.prompt = tokens(uniform(mix.chat_prompt_min, mix.chat_prompt_max));
      r.max_tokens = uniform(mix.chat_output_min, mix.chat_output_max);
      chats.push_back(i);
    }
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<std::vector<WorkloadRequest>> MakeTraceWorkload(const Trace& trace, double rate,
                                                               int count, uint64_t seed,
                                                               int vocab) {
  const int n = std::min<int>(count, static_cast<int>(trace.requests.size()));
  if (n < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("trace: ", trace.requests.size(), " requests selected; at least 2 needed"));
  }
  const double first = trace.requests[0].arrival_s;
  if (!(trace.rate() > 0) || !(rate > 0)) {
    return absl::InvalidArgumentError("trace: the selected requests all arrive at once");
  }
  const double time_scale = trace.rate() / rate;
  std::vector<WorkloadRequest> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    const TraceRequest& r = trace.requests[i];
    WorkloadRequest w;
    w.arrival_s = (r.arrival_s - first) * time_scale;
    w.prompt = PromptTokens(trace, i, vocab, seed);
    w.max_tokens = std::max(1, r.output_tokens);
    w.kind = "trace";
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace pdserve::measure
